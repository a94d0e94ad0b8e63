"""`python tools/bench.py`: paddle_ft against its peers, side by side in one run on the demo corpus.

Every measurement runs in a child process of its own (`jobs.py`, and `hf_trainer.py` under the peer
virtual environment), so that one engine's settings, threads and memory never leak into another's,
and a child's peak RSS is its own. `run.py` starts them and `report.py` writes the table and chart.
"""
