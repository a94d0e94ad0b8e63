"""Joining the process group (engine/distributed.from_environment) without starting processes."""
import paddle.distributed

from paddle_ft.engine.distributed import from_environment

BANNER = ("======================= Modified FLAGS detected =======================\n"
          "FLAGS(name='FLAGS_enable_pir_in_executor', current_value=True, default_value=False)\n"
          "=======================================================================\n")


def test_one_process_is_rank_0_of_1_without_joining_a_group(monkeypatch):
    monkeypatch.delenv("PADDLE_TRAINERS_NUM", raising=False)
    monkeypatch.setattr(paddle.distributed, "init_parallel_env", lambda: 1 / 0)
    dist = from_environment()
    assert (dist.rank, dist.world_size, dist.is_main, dist.active) == (0, 1, True, False)


def test_paddles_modified_flags_banner_is_hidden_and_anything_else_it_writes_shows(monkeypatch, capsys):
    def init_parallel_env():
        import sys
        sys.stderr.write("a warning before\n" + BANNER + "a warning after\n")

    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    monkeypatch.setattr(paddle.distributed, "init_parallel_env", init_parallel_env)
    monkeypatch.setattr(paddle.distributed, "get_rank", lambda: 1)
    monkeypatch.setattr(paddle.distributed, "get_world_size", lambda: 2)
    dist = from_environment()
    assert (dist.rank, dist.world_size) == (1, 2)
    assert capsys.readouterr().err == "a warning before\na warning after\n"
