"""The training ETA: costed from the planned batches' padded tokens, evaluations included."""
import numpy as np
import pytest

from paddle_ft.engine.eta import FORWARD_SHARE, WARM_UP_STEPS, StepWork, TrainingEta


def work_of(batches_per_epoch, lengths, total_steps, every=0, dev=None, test=None):
    return StepWork.plan(batches_per_epoch, total_steps, np.asarray(lengths), batch_size=2, rank=0, world_size=1,
                         dev_lengths=None if dev is None else np.asarray(dev),
                         test_lengths=None if test is None else np.asarray(test), every=every)


def test_a_steps_work_is_its_padded_tokens_and_dev_is_evaluated_where_training_evaluates_it():
    lengths = [10, 2, 5, 5, 8, 1]
    epoch = [[0, 1], [2, 3], [4, 5]]  # padded: 2 x 10, 2 x 5, 2 x 8
    work = work_of([epoch, epoch], lengths, total_steps=5, every=2, dev=[4, 4], test=[3])
    assert work.steps.tolist() == [20, 10, 16, 20, 10]  # max_steps ends the second epoch early
    assert work.evaluated_after == {2, 3, 4, 5}  # every 2, the first epoch's end, the last step
    assert (work.evaluation, work.final) == (8, 3)
    assert work_of([epoch], lengths, total_steps=3).evaluated_after == frozenset()  # no dev, no evaluation


def test_accumulated_micro_batches_are_padded_each_to_its_own_longest():
    work = StepWork.plan([[[0, 1, 2, 3]]], 1, np.array([9, 1, 2, 2]), batch_size=2, rank=0, world_size=1,
                         dev_lengths=None, test_lengths=None, every=0)
    assert work.steps.tolist() == [2 * 9 + 2 * 2]


def test_the_eta_is_the_tokens_left_at_the_measured_pace_plus_the_evaluations_left():
    # long and short batches alternate: a pace per step would be off by the mix the first steps drew
    lengths = [64] * 4 + [8] * 4
    epoch = [[0, 1], [4, 5], [2, 3], [6, 7]]
    work = work_of([epoch, epoch], lengths, total_steps=8, dev=[10, 10], test=[30])
    eta = TrainingEta(work)
    per_token = 0.001
    for step in range(1, 4):
        eta.stepped(step, (5.0 if step <= WARM_UP_STEPS else 0.0) + per_token * work.steps[step - 1])
    left_tokens = work.steps[3:].sum()
    # two evaluations left (the ends of both epochs), then test: costed as forward passes until one is timed
    expected = per_token * left_tokens + per_token * FORWARD_SHARE * (2 * 20 + 30)
    assert eta.seconds_left(3) == pytest.approx(expected)
    eta.stepped(4, per_token * work.steps[3])
    eta.evaluated(2.0)  # one evaluation of 20 tokens took 2 s: 0.1 s a token from now on
    assert eta.seconds_left(4) == pytest.approx(per_token * work.steps[4:].sum() + 0.1 * (20 + 30))


def test_no_eta_before_a_step_past_the_warm_up_was_timed():
    work = work_of([[[0, 1], [2, 3], [4, 5]]], [1] * 6, total_steps=3)
    eta = TrainingEta(work)
    for step in range(1, WARM_UP_STEPS + 1):
        eta.stepped(step, 1.0)
    assert eta.seconds_left(WARM_UP_STEPS) is None and "ETA measuring" in eta.describe(WARM_UP_STEPS)


def test_a_resumed_run_times_its_own_steps_from_where_it_resumed():
    work = work_of([[[0, 1], [2, 3], [4, 5], [6, 7]]], [4] * 8, total_steps=4)
    eta = TrainingEta(work, first_step=1)
    eta.stepped(2, 9.0)  # inside the resumed process's warm-up
    eta.stepped(2 + WARM_UP_STEPS, 0.8)
    assert eta.seconds_left(2 + WARM_UP_STEPS) == pytest.approx(0.1 * 8 * (4 - 2 - WARM_UP_STEPS))
