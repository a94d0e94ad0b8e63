"""save_state writes what paddle.save writes, holding one tensor's copy at a time."""
import hashlib
import pickle
import tracemalloc

import numpy as np
import paddle
import pytest

from paddle_ft.models.state_file import NAME_TABLE, save_state


def _tensor(shape, name, value=0.0):
    tensor = paddle.to_tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + value)
    tensor.name = name
    return tensor


def _model_and_optimizer_states():
    paddle.seed(0)
    model = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.Linear(16, 3))
    optimizer = paddle.optimizer.AdamW(parameters=model.parameters())
    model(paddle.randn([4, 8])).sum().backward()
    optimizer.step()
    return model.state_dict(), optimizer.state_dict()


STATES = {
    "a layer's state dict": lambda: _model_and_optimizer_states()[0],
    "AdamW's, with its scheduler's numbers": lambda: _model_and_optimizer_states()[1],
    # AMP O2 keeps fp32 master weights in a nested dict of tensors: paddle.save then pickles the whole dict as it
    # is, each tensor as (name, array), with no name table
    "master weights nested": lambda: {"moment": _tensor([2, 3], "w_moment1_0"),
                                      "master_weights": {"w": _tensor([2, 3], "w_fp32_master_0", 1.0)},
                                      "LR_Scheduler": {"last_epoch": 3}},
}


@pytest.mark.parametrize("kind", STATES)
def test_paddle_load_reads_the_same_objects_from_it_as_from_paddle_save(kind, tmp_path):
    state = STATES[kind]()
    paddle.save(state, str(tmp_path / "paddle"))
    save_state(state, tmp_path / "ours")
    with open(tmp_path / "paddle", "rb") as theirs, open(tmp_path / "ours", "rb") as ours:
        raw_theirs, raw_ours = pickle.load(theirs), pickle.load(ours)  # the same pickled objects
    assert raw_ours.keys() == raw_theirs.keys() and raw_ours.get(NAME_TABLE) == raw_theirs.get(NAME_TABLE)
    loaded_theirs, loaded = paddle.load(str(tmp_path / "paddle")), paddle.load(str(tmp_path / "ours"))
    assert loaded.keys() == loaded_theirs.keys()
    for key, value in loaded_theirs.items():
        for name, tensor in (value.items() if isinstance(value, dict) else [(None, value)]):
            mine = loaded[key][name] if name is not None else loaded[key]
            if isinstance(tensor, paddle.Tensor):
                assert isinstance(mine, paddle.Tensor) and mine.name == tensor.name, (key, name)
                np.testing.assert_array_equal(mine.numpy(), tensor.numpy())
            else:
                assert mine == tensor, (key, name)


def test_it_holds_one_tensors_copy_at_a_time_where_paddle_save_holds_them_all(tmp_path):
    """Four 4 MB tensors: paddle.save's peak of traced (numpy) memory is all four copies at once; save_state's is
    one, so a checkpoint of a large model no longer needs a second copy of it in memory."""
    state = {f"w{i}": _tensor([1024, 1024], f"w_{i}") for i in range(4)}
    size = 1024 * 1024 * 4

    def peak(save) -> int:
        tracemalloc.start()
        try:
            save()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(lambda: paddle.save(state, str(tmp_path / "paddle"))) >= 4 * size
    assert peak(lambda: save_state(state, tmp_path / "ours")) < 1.5 * size


def test_save_state_returns_the_sha256_of_the_bytes_it_wrote(tmp_path):
    state = {"w": paddle.randn([64, 32]), "step": 3}
    digest = save_state(state, tmp_path / "state")
    assert digest == hashlib.sha256((tmp_path / "state").read_bytes()).hexdigest()
