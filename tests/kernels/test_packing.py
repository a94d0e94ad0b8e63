"""Issue 66: padding-free batches. A batch's texts packed into one row (positions restarting, attention kept inside
each text) give each text the logits and the gradients it gets in a batch of its own; the packed attention kernel is
the padded one's per text; a layer that cannot keep texts apart never sees a packed row."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from paddle_ft.data.features import Features, pack_batch
from paddle_ft.kernels import speed_up_cpu_training
from paddle_ft.kernels.fused import attention_core, kernels
from paddle_ft.models.networks import BERTForTextClassification, scratch_encoder

LENGTHS = (5, 9, 3, 7)


@pytest.fixture(scope="module")
def module():
    built, why_not = kernels()
    assert built is not None, why_not
    return built


def _leaf(values):
    tensor = paddle.to_tensor(values.astype("float32"))
    tensor.stop_gradient = False
    return tensor


def test_the_packed_attention_is_the_padded_kernels_per_text_bit_for_bit(module):
    rng = np.random.default_rng(0)
    heads, width, tokens = 2, 8, sum(LENGTHS)
    q, k, v = (_leaf(rng.standard_normal((tokens, width))) for _ in range(3))
    offsets = paddle.to_tensor(np.concatenate([[0], np.cumsum(LENGTHS)]).astype("int64"))
    upstream = rng.standard_normal((tokens, width)).astype("float32")
    out = module.paddle_ft_packed_attention(q, k, v, offsets, heads, float((width // heads) ** -0.5), 0.0)[0]
    grads = paddle.grad([out], [q, k, v], [paddle.to_tensor(upstream)])
    start = 0
    for length in LENGTHS:
        text = slice(start, start + length)
        alone = [_leaf(t.numpy()[text][None]) for t in (q, k, v)]
        expected = attention_core(*alone, paddle.zeros([1, 1, 1, length]), heads, 0.0)
        expected_grads = paddle.grad([expected], alone, [paddle.to_tensor(upstream[text][None])])
        np.testing.assert_array_equal(out.numpy()[text], expected.numpy()[0])
        for got, want in zip(grads, expected_grads):
            np.testing.assert_array_equal(got.numpy()[text], want.numpy()[0])
        start += length
    with pytest.raises(OSError, match="offsets must run from 0 to the number of tokens"):  # (PD_CHECK raises so)
        module.paddle_ft_packed_attention(q, k, v, offsets[:-1], heads, 1.0, 0.0)


def _texts(tokenizer):
    rng = np.random.default_rng(1)
    ids = [np.concatenate([[tokenizer.cls_token_id], rng.integers(5, 20, n - 2), [tokenizer.sep_token_id]])
           for n in LENGTHS]
    return Features(input_ids=ids, token_type_ids=[np.zeros_like(row) for row in ids],
                    labels=np.array([0, 1, 1, 0]))


@pytest.mark.parametrize("pooling", ["pooler", "cls", "mean"])
def test_a_packed_batch_gives_each_text_the_logits_and_gradients_it_gets_alone(tokenizer, module, pooling):
    paddle.seed(0)
    encoder = scratch_encoder("bert", len(tokenizer.vocab), hidden_size=32, num_layers=2, num_heads=2,
                              intermediate_size=64, max_position_embeddings=64, dropout=0.0,
                              pad_token_id=tokenizer.pad_token_id)
    model = BERTForTextClassification(encoder, num_classes=2, dropout=0.0, pooling=pooling)
    assert speed_up_cpu_training(model, fast_linear=True, fused_kernels=True).fused_layers == 2
    model.train()
    features = _texts(tokenizer)
    batch = pack_batch(features, range(len(LENGTHS)))
    assert batch["input_ids"].shape == (1, sum(LENGTHS)) and batch["offsets"].tolist() == [0, 5, 14, 17, 24]
    assert batch["position_ids"][0, 5:14].tolist() == list(range(9))
    logits = model(*(paddle.to_tensor(batch[key]) for key in ("input_ids", "token_type_ids")),
                   position_ids=paddle.to_tensor(batch["position_ids"]), offsets=paddle.to_tensor(batch["offsets"]))
    assert logits.shape == [len(LENGTHS), 2]
    parameters = [p for p in model.parameters() if not p.stop_gradient]
    for i in range(len(LENGTHS)):
        packed_grads = paddle.grad([F.cross_entropy(logits[i:i + 1], paddle.to_tensor([1]))], parameters,
                                   retain_graph=True, allow_unused=True)
        ids = paddle.to_tensor(features.input_ids[i][None])
        alone = model(ids, paddle.zeros_like(ids))
        np.testing.assert_allclose(logits.numpy()[i], alone.numpy()[0], rtol=1e-5, atol=1e-6)
        alone_grads = paddle.grad([F.cross_entropy(alone, paddle.to_tensor([1]))], parameters, allow_unused=True)
        for parameter, got, want in zip(parameters, packed_grads, alone_grads):
            if want is None:
                assert got is None or not np.abs(got.numpy()).any(), parameter.name
                continue
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-6, err_msg=parameter.name)


def test_an_encoder_not_on_the_fused_kernels_refuses_a_packed_row(tokenizer):
    paddle.seed(0)
    encoder = scratch_encoder("bert", len(tokenizer.vocab), hidden_size=32, num_layers=1, num_heads=2,
                              intermediate_size=64, max_position_embeddings=64, dropout=0.0)
    model = BERTForTextClassification(encoder, num_classes=2, dropout=0.0)
    batch = pack_batch(_texts(tokenizer), range(2))
    with pytest.raises(RuntimeError, match="need the encoder's layers on the fused training kernels"):
        model(*(paddle.to_tensor(batch[key]) for key in ("input_ids", "token_type_ids", "position_ids")),
              offsets=paddle.to_tensor(batch["offsets"]))


@pytest.mark.parametrize("setting, message", [
    ("train.runtime.recompute=true", "config key 'train.runtime.recompute' (from -o): is true, which recomputes a layer outside "
                                     "the packed forward: set one of them false"),
    ("task=multi_label", "config key 'task' (from -o): is multi_label: packed batches train single-label classifiers; set "
                         "train.runtime.packed_batches=false"),
])
def test_what_packing_cannot_serve_is_refused_in_one_line(setting, message):
    from conftest import DEMO

    from paddle_ft.config import load_config
    from paddle_ft.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        load_config(DEMO, ["train.runtime.packed_batches=true", setting, "data.labels=null",
                           "train.evaluation.metric=macro_f1"])
    assert str(refused.value) == message


@pytest.mark.slow
def test_training_with_packed_batches_learns_and_counts_no_padding(tiny_config_args, tmp_path):
    from conftest import DEMO, overrides

    from paddle_ft.artifacts.run import RunFiles
    from paddle_ft.cli import main

    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + ["train.runtime.packed_batches=true"])]) == 0
    run = RunFiles(tmp_path / "out")
    events = run.read_events("train")
    assert all(e.values["padded_tokens_per_s"] == pytest.approx(e.values["tokens_per_s"]) for e in events)
    assert run.read_results().test["accuracy"] > 0.8  # the synthetic corpus: the padded run scores ~1.0


def test_packing_without_the_fused_kernels_is_refused_in_one_line(tiny_config_args, capsys):
    from conftest import DEMO, overrides

    from paddle_ft.cli import main

    assert main(["train", "--config", DEMO, *overrides(tiny_config_args + [
        "train.runtime.packed_batches=true", "train.runtime.fused_kernels=false"])]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: config key 'train.runtime.packed_batches': packs texts on a CPU with the fused kernels, and "
        "train.runtime.fused_kernels is false; set it false")
