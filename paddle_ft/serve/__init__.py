"""`python tools/serve.py --export OUT/export`: the exported model behind an HTTP endpoint.

`batcher.py` groups concurrent requests into one predictor call, `app.py` is the FastAPI application
(validation, limits, health, metrics), `main.py` the command line that runs it under uvicorn.
"""
