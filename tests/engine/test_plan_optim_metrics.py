import numpy as np
import pytest

from paddle_ft.engine.metrics import bootstrap_intervals, classification_report
from paddle_ft.engine.optim import build_optimizer, uses_weight_decay
from paddle_ft.engine.plan import plan_run, warmup_steps


def test_plan_counts_partial_groups_as_steps():
    plan = plan_run(train_examples=1000, batch_size=32, accumulate_steps=4, epochs=3, max_steps=None, warmup=0.1)
    assert plan.micro_batches_per_epoch == 32      # 31 full + 1 partial
    assert plan.steps_per_epoch == 8               # 32 micro-batches / 4
    assert plan.total_steps == 24
    assert plan.warmup_steps == 2
    assert plan.effective_batch_size == 128


def test_max_steps_overrides_epochs():
    plan = plan_run(1000, 32, 1, epochs=1, max_steps=70, warmup=5)
    assert (plan.total_steps, plan.epochs, plan.warmup_steps) == (70, 3, 5)


def test_warmup_proportion_or_steps():
    assert warmup_steps(0.25, 100) == 25
    assert warmup_steps(10, 100) == 10
    assert warmup_steps(500, 100) == 100
    assert warmup_steps(0, 100) == 0


def test_lr_schedule_at_end_of_warmup_and_last_step(make_model):
    model = make_model()
    optimizer, scheduler = build_optimizer(model, learning_rate=1e-3, weight_decay=0.0, total_steps=100,
                                           warmup_steps=10)
    lrs = []
    for _ in range(100):
        lrs.append(optimizer.get_lr())
        scheduler.step()
    assert lrs[0] == 0.0
    assert lrs[5] == pytest.approx(0.5e-3)
    assert lrs[10] == pytest.approx(1e-3)       # warmup over: the peak
    assert lrs[99] == pytest.approx(1e-3 * 1 / 90)  # linear decay, one step before zero


def test_decay_grouping_selects_exactly_the_weight_matrices(make_model):
    model = make_model()
    names = [name for name, _ in model.named_parameters()]
    decayed = sorted(n for n in names if uses_weight_decay(n))
    expected = sorted(n for n in names if n.endswith(".weight") and "norm" not in n)
    assert decayed == expected
    assert "encoder.embeddings.layer_norm.weight" not in decayed
    assert "encoder.encoder.layers.0.norm1.weight" not in decayed
    assert "classifier.bias" not in decayed
    assert "classifier.weight" in decayed and "encoder.embeddings.word_embeddings.weight" in decayed
    optimizer, _ = build_optimizer(model, 1e-3, weight_decay=0.01, total_steps=10, warmup_steps=0)
    by_internal = {p.name: n for n, p in model.named_parameters()}
    assert sorted(by_internal[p] for p in by_internal if optimizer._apply_decay_param_fun(p)) == expected


def test_the_masked_lm_heads_bias_and_layer_norm_are_not_decayed(make_model):
    from paddle_ft.models.networks import MaskedLanguageModel

    names = [name for name, _ in MaskedLanguageModel(make_model().encoder).named_parameters()]
    assert "decoder_bias" in names and not uses_weight_decay("decoder_bias")
    assert sorted(n for n in names if n.startswith("head.") and uses_weight_decay(n)) == ["head.transform.weight"]


def test_classification_report_values():
    gold = np.array([0, 0, 0, 1, 1, 2])
    pred = np.array([0, 0, 1, 1, 0, 0])
    report = classification_report(gold, pred, ("a", "b", "c"))
    assert report["accuracy"] == pytest.approx(3 / 6)
    a, b, c = (report["per_class"][k] for k in "abc")
    assert (a["precision"], a["recall"]) == (pytest.approx(2 / 4), pytest.approx(2 / 3))
    assert a["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert (b["precision"], b["recall"], b["f1"]) == (0.5, 0.5, 0.5)
    assert (c["precision"], c["recall"], c["f1"], c["support"]) == (0.0, 0.0, 0.0, 1)
    assert report["macro_f1"] == pytest.approx((a["f1"] + 0.5 + 0.0) / 3)


def test_bootstrap_intervals_are_the_percentiles_of_the_reports_on_resampled_texts():
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 3, 200)
    predicted = np.where(rng.random(200) < 0.7, gold, rng.integers(0, 3, 200))
    intervals = bootstrap_intervals(gold, predicted, 3, rounds=40)
    # the same resamples, scored one by one with the report itself
    samples = np.random.default_rng(0).integers(0, 200, size=(40, 200))
    reports = [classification_report(gold[s], predicted[s], ("a", "b", "c")) for s in samples]
    for metric in ("accuracy", "macro_f1"):
        values = [r[metric] for r in reports]
        assert intervals[metric] == pytest.approx([np.percentile(values, 2.5), np.percentile(values, 97.5)])
    point = classification_report(gold, predicted, ("a", "b", "c"))
    low, high = point["intervals"]["accuracy"]
    assert low < point["accuracy"] < high and 0.08 < high - low < 0.16  # ~ 4 standard errors of 0.7 at n=200
    assert bootstrap_intervals(gold[:0], predicted[:0], 3) == {}
