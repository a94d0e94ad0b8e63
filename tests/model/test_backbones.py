"""Pretrained backbones: loading and its account, the checks before training, and the fine-tuning controls."""
from pathlib import Path

import numpy as np
import paddle
import pytest

from conftest import ROOT
from paddle_ft.workflows.build import build_model, build_tokenizer, freeze, resolve_backbone
from paddle_ft.config import load_config
from paddle_ft.engine.optim import build_optimizer, learning_rate_ratio
from paddle_ft.errors import ConfigError
from paddle_ft.models.networks import scratch_encoder


def save_encoder(folder, tokenizer, encoder=None, drop=(), architecture="bert", seed=2, **shape):
    """A PaddleNLP backbone folder of a tiny random encoder; `drop` leaves weights out of its file."""
    paddle.seed(seed)
    encoder = encoder or scratch_encoder(architecture, shape.get("vocab_size", len(tokenizer.vocab)), 32, 2, 2, 64,
                                         shape.get("positions", 64), 0.1, tokenizer.pad_token_id)
    encoder.config.architectures = [type(encoder).__name__]
    encoder.config.save_pretrained(str(folder))
    paddle.save({k: v for k, v in encoder.state_dict().items() if not k.startswith(drop)},
                str(folder / "model_state.pdparams"))
    tokenizer.save_pretrained(str(folder))
    return encoder


def built(folder, *overrides, max_length=32, num_classes=3):
    config = load_config(None, [f"model.backbone={folder}", f"data.max_length={max_length}", *overrides])
    model_config = resolve_backbone(config.model)
    return build_model(model_config, num_classes, build_tokenizer(model_config), max_length), config


def test_a_local_paddlenlp_backbone_loads_every_weight_and_says_so(tmp_path, tokenizer, capsys):
    encoder = save_encoder(tmp_path, tokenizer)
    model, _ = built(tmp_path, "model.dropout=0.0")
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"loaded {len(encoder.state_dict())} pretrained tensors from {tmp_path}; newly initialised: nothing; the "
        "classifier head is new")
    ids = paddle.to_tensor([[2, 6, 7, 3]])
    encoder.eval()
    model.eval()
    assert np.array_equal(model.encoder(ids)[1].numpy(), encoder(ids)[1].numpy())  # pretrained weights kept
    assert model(ids).shape == [1, 3]
    assert 0.01 < float(model.classifier.weight.numpy().std()) < 0.03  # head initialised Normal(0, 0.02)


def test_a_checkpoint_without_a_pooler_needs_cls_or_mean_pooling(tmp_path, tokenizer, capsys):
    save_encoder(tmp_path, tokenizer, drop=("pooler.",))
    with pytest.raises(ConfigError, match=rf"'model.pooling': is pooler, but {tmp_path} has no pooler weights"):
        built(tmp_path)
    model, _ = built(tmp_path, "model.pooling=cls")
    # issue 63: every e5 run said its unused pooler was "newly initialised"
    assert (f"from {tmp_path}; newly initialised: nothing; no pooler (this model does not use one); the classifier "
            "head is new") in capsys.readouterr().out
    assert all(p.stop_gradient for p in model.encoder.pooler.parameters())  # unused: no gradient, no state


@pytest.mark.parametrize("missing", ["out/pretrain-demo/best", "./encoder", "~/no-such-encoder"])
def test_a_backbone_path_that_does_not_exist_is_one_line_not_a_download_attempt(missing):
    from paddle_ft.models.backbone import resolve

    with pytest.raises(ConfigError, match=f"'model.backbone': there is no model folder at '{missing}'"):
        resolve(missing, "unused", print)
    assert resolve("ernie-3.0-mini-zh", "unused", print) == "ernie-3.0-mini-zh"  # a name goes to PaddleNLP


@pytest.mark.parametrize("architecture, positions, usable", [("bert", 64, 64), ("roberta", 64, 63)])
def test_max_length_is_checked_against_the_positions_the_encoder_takes(architecture, positions, usable, tmp_path,
                                                                       tokenizer):
    save_encoder(tmp_path, tokenizer, architecture=architecture, positions=positions)
    built(tmp_path, max_length=usable)
    why = r" \(RoBERTa numbers positions from pad_token_id \+ 1\)" if usable < positions else ""
    with pytest.raises(ConfigError, match=rf"'data.max_length': is {usable + 1}, but {tmp_path} takes at most "
                                          rf"{usable} tokens{why}; set data.max_length: {usable} or less"):
        built(tmp_path, max_length=usable + 1)


def test_a_scratch_roberta_as_long_as_its_positions_is_refused_before_training(vocab_file, tokenizer):
    config = load_config(None, [f"model.scratch.vocab_file={vocab_file}", "model.scratch.architecture=roberta",
                                "model.scratch.max_position_embeddings=64", "data.max_length=64"])
    with pytest.raises(ConfigError, match="'data.max_length': is 64, but the scratch encoder takes at most 63"):
        build_model(config.model, 2, build_tokenizer(config.model), 64)


def test_a_tokenizer_larger_than_the_embeddings_is_refused(tmp_path, tokenizer):
    save_encoder(tmp_path, tokenizer, vocab_size=len(tokenizer.vocab) - 5)
    with pytest.raises(ConfigError, match=rf"'model.backbone': the tokenizer of {tmp_path} has {len(tokenizer)} tokens "
                                          rf"but its encoder only {len(tokenizer) - 5} embeddings"):
        built(tmp_path)


def test_encoder_dropout_replaces_the_checkpoint_dropout(tmp_path, tokenizer):
    save_encoder(tmp_path, tokenizer)  # saved with dropout 0.1
    model, _ = built(tmp_path, "model.encoder_dropout=0.25", "model.dropout=0.4")
    config = model.encoder.config
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (0.25, 0.25)
    assert model.encoder.embeddings.dropout.p == 0.25 and model.encoder.encoder.layers[1].dropout1.p == 0.25
    assert model.dropout.p == 0.4
    kept, _ = built(tmp_path)
    assert kept.encoder.config.hidden_dropout_prob == 0.1  # null keeps the checkpoint's


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_cls_and_mean_pooling_compute_what_they_say(pooling, make_model):
    model = make_model(seed=4)
    model.pooling = pooling
    model.eval()
    ids = paddle.to_tensor([[2, 6, 7, 8, 3], [2, 9, 3, 0, 0]])  # the second row padded
    sequence = model.encoder(ids)[0].numpy()
    if pooling == "cls":
        vectors = sequence[:, 0]
    else:
        vectors = np.stack([sequence[0].mean(axis=0), sequence[1, :3].mean(axis=0)])  # pads left out
    expected = vectors @ model.classifier.weight.numpy() + model.classifier.bias.numpy()
    np.testing.assert_allclose(model(ids).numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(model(ids[1:, :3]).numpy(), expected[1:], atol=1e-5)  # padding changes nothing


def one_adam_step(model, **options):
    """Parameters before and after one AdamW step (no warmup, no decay) on a real loss."""
    optimizer, _ = build_optimizer(model, learning_rate=1e-3, weight_decay=0.0, total_steps=10, warmup_steps=0,
                                   **options)
    before = {name: p.numpy().copy() for name, p in model.named_parameters()}
    model.train()
    logits = model(paddle.to_tensor([[2, 6, 7, 8, 3], [2, 9, 10, 3, 0]]))
    paddle.nn.functional.cross_entropy(logits, paddle.to_tensor([0, 1])).backward()
    optimizer.step()
    return optimizer, {name: np.abs(p.numpy() - before[name]).max() for name, p in model.named_parameters()}


def test_layer_wise_decay_and_the_head_rate_scale_each_update_exactly(make_model):
    # Adam's first step moves every weight with a gradient by its learning rate (less by eps/|g|, tiny here)
    _, moved = one_adam_step(make_model(seed=1), layer_lr_decay=0.5, head_learning_rate=1e-2)
    assert moved["encoder.embeddings.word_embeddings.weight"] == pytest.approx(1e-3 * 0.5 ** 2, rel=1e-2)
    assert moved["encoder.encoder.layers.0.linear1.weight"] == pytest.approx(1e-3 * 0.5, rel=1e-2)
    assert moved["encoder.encoder.layers.1.linear1.weight"] == pytest.approx(1e-3, rel=1e-2)
    assert moved["encoder.pooler.dense.weight"] == pytest.approx(1e-3, rel=1e-2)
    assert moved["classifier.weight"] == pytest.approx(1e-2, rel=1e-2)
    assert learning_rate_ratio("encoder.encoder.layers.0.norm1.bias", 12, 0.9, 1.0) == pytest.approx(0.9 ** 11)


def test_frozen_parameters_get_no_gradient_no_state_and_do_not_move(make_model):
    from paddle_ft.kernels.cpu_linear import use_fast_linear

    model = make_model(seed=1)
    freeze(model, embeddings=True, layers=1)
    use_fast_linear(model)  # its backward must give no gradient to what is frozen
    optimizer, moved = one_adam_step(model)
    frozen = [n for n in moved if n.startswith(("encoder.embeddings.", "encoder.encoder.layers.0."))]
    assert len(frozen) == 5 + 16 and all(moved[n] == 0 for n in frozen)
    assert moved["encoder.encoder.layers.1.linear1.weight"] > 0 and moved["classifier.weight"] > 0
    by_internal = {p.name: n for n, p in model.named_parameters()}
    with_state = {by_internal[k.split("_moment")[0]] for k in optimizer.state_dict() if "_moment1" in k}
    assert with_state and not with_state & set(frozen)


def test_freezing_more_layers_than_the_encoder_has_is_refused(tmp_path, tokenizer):
    save_encoder(tmp_path, tokenizer)
    with pytest.raises(ConfigError, match=rf"'model.freeze_layers': is 3, but {tmp_path} has 2 layers"):
        built(tmp_path, "model.freeze_layers=3")


@pytest.mark.parametrize("fast_linear", [False, True])
def test_recompute_gives_bit_identical_gradients_dropout_included(fast_linear, make_model):
    from paddle_ft.kernels.cpu_linear import use_fast_linear
    from paddle_ft.engine.recompute import use_recompute

    def gradients(recompute: bool) -> dict:
        model = make_model(seed=3, dropout=0.1)
        if fast_linear:
            use_fast_linear(model)
        if recompute:
            assert use_recompute(model) == 2
        model.train()
        paddle.seed(7)  # the same dropout masks, drawn again in backward under recompute
        logits = model(paddle.to_tensor([[2, 6, 7, 8, 3], [2, 9, 10, 3, 0]]))
        paddle.nn.functional.cross_entropy(logits, paddle.to_tensor([0, 1])).backward()
        return {name: p.grad.numpy() for name, p in model.named_parameters()}

    plain, recomputed = gradients(False), gradients(True)
    assert plain.keys() == recomputed.keys() and all(np.array_equal(plain[k], recomputed[k]) for k in plain)


def test_tests_run_outside_the_checkout_so_make_demo_then_make_test_passes(in_an_empty_working_folder):
    """make pretrain-demo writes out/pretrain-demo/best into the checkout; the relative paths above must not find it."""
    assert Path.cwd() == in_an_empty_working_folder and ROOT not in Path.cwd().parents
    assert list(Path.cwd().iterdir()) == []


def test_the_shipped_demo_encoder_is_the_one_its_manifest_describes():
    """models/demo-encoder (what make demo-tiny fine-tunes) carries how it was made: its weights' and recipe's checksums
    hold, and PaddleNLP loads it as the encoder configs/demo-tiny.yaml names."""
    import json
    import runpy

    from conftest import ROOT

    from paddle_ft.models.backbone import load_encoder
    from paddle_ft.config import load_config
    from paddle_ft.io import file_sha256

    folder = ROOT / "models" / "demo-encoder"
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["weights_sha256"] == file_sha256(folder / "model_state.pdparams")
    shipping = runpy.run_path(str(ROOT / "tools" / "demo_encoder.py"))  # changed settings: ship it again
    assert manifest["recipe"]["settings_sha256"] == shipping["settings_sha256"](ROOT / manifest["recipe"]["file"])
    assert 0.2 < manifest["held_out"]["masked_accuracy"] < 1
    assert load_config(ROOT / "configs" / "demo-tiny.yaml").model.backbone == "models/demo-encoder"
    encoder, report = load_encoder(str(folder))
    assert report.newly_initialised == () and encoder.config.num_hidden_layers == 2
