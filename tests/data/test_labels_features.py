import numpy as np
import pytest

from paddle_ft.data.features import eval_batches, pad_batch, tokenize
from paddle_ft.data.labels import LabelMap, resolve_labels
from paddle_ft.data.readers import Example
from paddle_ft.engine.batching import TrainBatchSampler, micro_batches
from paddle_ft.errors import ConfigError, UserError


def test_label_map_sources_and_round_trip(tmp_path):
    assert resolve_labels(("b", "a"), None).names == ("b", "a")
    (tmp_path / "labels.txt").write_text("负面\n\n正面\n", encoding="utf-8")
    assert resolve_labels(str(tmp_path / "labels.txt"), None).names == ("负面", "正面")
    from_train = resolve_labels(None, ["正面", "负面", "正面"])
    assert from_train.names == tuple(sorted(["正面", "负面"]))
    from_train.save(tmp_path)
    assert LabelMap.load(tmp_path) == from_train
    with pytest.raises(ConfigError, match="data.labels.*not found"):
        resolve_labels(str(tmp_path / "missing.txt"), None)
    with pytest.raises(UserError, match="duplicate"):
        LabelMap(["a", "a"])


def test_tokenize_and_dynamic_padding(tokenizer):
    examples = [Example("好的", None, "正面", 2), Example("差差差差", None, "负面", 3)]
    features = tokenize(examples, tokenizer, max_length=5, label_map=LabelMap(["负面", "正面"]))
    assert features.lengths.tolist() == [4, 5]  # [CLS] 2 chars [SEP]; 4 chars truncated to 3
    batch = pad_batch(features, [0, 1], tokenizer.pad_token_id)
    assert batch["input_ids"].shape == (2, 5)
    assert batch["input_ids"][0, 4] == tokenizer.pad_token_id
    assert batch["labels"].tolist() == [1, 0]


def test_text_pairs_get_segment_ids(tokenizer):
    features = tokenize([Example("好", "差了", "正面", 2)], tokenizer, max_length=16)
    assert features.token_type_ids[0].tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("group_by_length", [False, True])
def test_sampler_yields_a_permutation_each_epoch(group_by_length):
    lengths = np.random.default_rng(0).integers(3, 128, size=1003)
    sampler = TrainBatchSampler(lengths, batch_size=16, seed=7, group_by_length=group_by_length, chunk_batches=8)
    orders = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler) == 63
        flat = [i for b in batches for i in b]
        assert sorted(flat) == list(range(1003))
        orders.append(flat)
    assert orders[0] != orders[1]
    sampler.set_epoch(1)
    assert [i for b in sampler for i in b] == orders[1]  # same seed and epoch, same order


def test_grouping_cuts_padding_without_changing_the_examples():
    lengths = np.random.default_rng(0).integers(3, 128, size=2048)

    def padded_tokens(group):
        sampler = TrainBatchSampler(lengths, 32, seed=1, group_by_length=group)
        return sum(len(b) * lengths[b].max() for b in sampler)

    assert padded_tokens(True) < 0.6 * padded_tokens(False)


def test_eval_batches_cover_everything_longest_first():
    batches = eval_batches(np.array([3, 9, 5, 7]), 3)
    assert batches == [[1, 3, 2], [0]]


def test_micro_batches_split_a_step_across_accumulation_and_ranks():
    step = list(range(10))
    assert micro_batches(step, 4) == ([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]], 10)
    assert micro_batches(step, 2, rank=0, world_size=2) == ([[0, 2], [4, 6], [8]], 10)
    assert micro_batches(step, 2, rank=1, world_size=2) == ([[1, 3], [5, 7], [9]], 10)
    # a last piece smaller than the number of ranks is dropped on every rank
    assert micro_batches(list(range(9)), 2, rank=1, world_size=2) == ([[1, 3], [5, 7]], 8)


@pytest.mark.parametrize("group_by_length", [False, True])
def test_under_two_ranks_the_one_example_batch_sits_out_and_no_other(group_by_length):
    """1,025 examples in steps of 32 over 2 ranks: the 1-example partial batch would leave a rank empty-handed."""
    lengths = np.random.default_rng(0).integers(3, 128, size=1025)
    sampler = TrainBatchSampler(lengths, 32, seed=3, group_by_length=group_by_length, chunk_batches=8, min_batch=2)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 32 and {len(b) for b in batches} == {32}
    assert len({i for b in batches for i in b}) == 1024
    everyone = TrainBatchSampler(lengths, 32, seed=3, group_by_length=group_by_length, chunk_batches=8)
    assert len(list(everyone)) == len(everyone) == 33  # one process: nothing sits out


RUN_SHAPES = [(examples, *shape) for examples in (1, 2, 3, 31, 32, 33, 34, 63, 65, 66, 97, 1001)
              for shape in ((4, 1, 1), (4, 1, 2), (2, 2, 2), (3, 2, 4), (1, 1, 3)) if examples >= shape[2]]


@pytest.mark.parametrize("examples,batch_size,accumulate,world_size", RUN_SHAPES)
def test_the_plan_counts_the_steps_and_micro_batches_the_sampler_and_ranks_make(examples, batch_size, accumulate,
                                                                               world_size):
    from paddle_ft.engine.plan import plan_run

    plan = plan_run(examples, batch_size, accumulate, epochs=1, max_steps=None, warmup=0, world_size=world_size)
    steps = list(TrainBatchSampler(np.full(examples, 5), plan.effective_batch_size, seed=0, min_batch=world_size))
    assert plan.steps_per_epoch == len(steps)
    for rank in range(world_size):
        groups = [micro_batches(step, batch_size, rank, world_size)[0] for step in steps]
        assert all(groups), "a rank with nothing to do in a step"
        assert plan.micro_batches_per_epoch == sum(len(g) for g in groups)
