"""Masked-language-model pretraining: the masks, the objective, the command, its resume and its output folder."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest
from conftest import DEMO, overrides, synthetic_rows

from paddle_ft.cli import main
from paddle_ft.data.masking import Vocabulary, mask_example, word_ids_of

ROOT = Path(__file__).resolve().parents[2]
VOCABULARY = Vocabulary(size=100, mask_id=4, special_ids=frozenset({0, 1, 2, 3, 4}))


def example(length: int, rng) -> np.ndarray:
    """[CLS] ordinary tokens [SEP], padded with two [PAD]s."""
    return np.array([2, *rng.integers(5, 100, size=length), 3, 0, 0], dtype=np.int64)


def test_the_masked_share_is_exact_and_the_80_10_10_split_holds():
    rng = np.random.default_rng(0)
    outcome, draws = {"mask": 0, "random": 0, "kept": 0}, 0
    for _ in range(4000):
        ids = example(int(rng.integers(1, 60)), rng)
        seen, positions = mask_example(ids, VOCABULARY, rng)
        candidates = len(ids) - 4  # not [CLS], [SEP] or the pads
        assert len(positions) == max(1, round(0.15 * candidates))  # exactly the share, at least one
        assert not np.isin(ids[positions], [0, 1, 2, 3, 4]).any()  # specials are never chosen
        untouched = np.setdiff1d(np.arange(len(ids)), positions)
        assert np.array_equal(seen[untouched], ids[untouched])  # nothing else changes
        for p in positions:
            draws += 1
            if seen[p] == 4:
                outcome["mask"] += 1
            elif seen[p] == ids[p]:
                outcome["kept"] += 1  # (a random draw of the same token is counted here: 1 in 95)
            else:
                outcome["random"] += 1
                assert seen[p] >= 5  # a random replacement is never a special token
    assert outcome["mask"] / draws == pytest.approx(0.8, abs=0.015)
    assert outcome["random"] / draws == pytest.approx(0.1 * 94 / 95, abs=0.01)
    assert outcome["kept"] / draws == pytest.approx(0.1 + 0.1 / 95, abs=0.01)


def test_whole_words_are_masked_together():
    rng = np.random.default_rng(1)
    counts = [2, 1, 3, 2, 4, 1, 2, 3, 2, 2]  # tokens per word
    words = word_ids_of(counts, 64)
    ids = np.array([2, *range(10, 10 + sum(counts)), 3], dtype=np.int64)
    assert list(words[:4]) == [-1, 0, 0, 1] and words[-1] == -1
    for _ in range(500):
        _, positions = mask_example(ids, VOCABULARY, rng, rate=0.25, word_ids=words)
        chosen = set(words[positions])
        for word in chosen:  # every token of a chosen word, and no other
            assert set(np.flatnonzero(words == word)) <= set(positions)
        assert len(positions) == sum(counts[w] for w in chosen)
        assert len(positions) <= max(round(0.25 * 22), max(counts))


def test_word_groups_follow_jieba_on_the_token_offsets(tokenizer):
    from paddle_ft.data.corpus import pretraining_features
    from paddle_ft.tokenization import fastest

    features = pretraining_features(["手机质量很好", "我买东西"], fastest(tokenizer), 16, whole_word=True)
    import jieba

    for text, words in zip(["手机质量很好", "我买东西"], features.word_ids):
        expected = [-1, *[i for i, w in enumerate(jieba.lcut(text)) for _ in w], -1]
        assert words.tolist() == expected


def test_the_head_is_computed_on_masked_positions_only(tokenizer, make_model):
    from paddle_ft.models.networks import MaskedLanguageModel

    model = MaskedLanguageModel(make_model(seed=2).encoder)
    model.eval()
    ids = paddle.to_tensor([[2, 6, 7, 8, 3], [2, 9, 10, 3, 0]])
    flat = paddle.to_tensor([1, 3, 6])  # (row 0, 1), (row 0, 3), (row 1, 1)
    logits = model(ids, paddle.zeros_like(ids), flat)
    assert logits.shape == [3, model.encoder.config.vocab_size]
    everything = model(ids, paddle.zeros_like(ids), paddle.arange(10))  # every position
    np.testing.assert_allclose(logits.numpy(), everything.numpy()[[1, 3, 6]], atol=1e-5)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(text for text, _ in synthetic_rows(400, seed=5)) + "\n", encoding="utf-8")
    return path


def pretrain_args(tiny_config_args, corpus, out, *extra):
    keep = [a for a in tiny_config_args if a.startswith(("model.scratch.", "data.max_length", "data.cache_dir"))]
    return ["--config", DEMO, *overrides([*keep, f"output_dir={out}", f"pretrain.corpus=[{corpus}]",
                                          "data.train=null", "data.dev=null", "data.test=null", "train.batch_size=16",
                                          "train.max_steps=12",
                                          "train.evaluation.every=4",
                                          "train.checkpoints.every=4", "train.runtime.log_every=1",
                                          "train.optimizer.learning_rate=1e-3", *extra])]


OBJECTIVES = {"mlm": ["train.evaluation.metric=masked_accuracy"],
              "electra": ["pretrain.objective=electra", "train.evaluation.metric=replaced_f1"]}


@pytest.mark.slow  # three short pretraining runs
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_a_stopped_pretraining_run_resumes_bit_identical_and_its_folder_is_a_backbone(objective, tiny_config_args,
                                                                                       corpus, tmp_path, monkeypatch,
                                                                                       capsys):
    from paddle_ft.models.backbone import load_encoder
    from paddle_ft.engine import trainer

    assert main(["pretrain", *pretrain_args(tiny_config_args, corpus, tmp_path / "whole", *OBJECTIVES[objective])]) == 0
    assert "held-out masked_accuracy" in capsys.readouterr().out
    real, calls = trainer._forward_backward, []

    def signalled_at_step_6(*args, **kwargs):
        calls.append(1)
        if len(calls) == 6:
            signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "_forward_backward", signalled_at_step_6)
    broken = pretrain_args(tiny_config_args, corpus, tmp_path / "broken", *OBJECTIVES[objective])
    assert main(["pretrain", *broken]) == 128 + signal.SIGTERM
    assert "Resume with: python -m paddle_ft pretrain --config" in capsys.readouterr().err
    monkeypatch.setattr(trainer, "_forward_backward", real)
    assert main(["pretrain", *broken, "-o", "train.resume=auto"]) == 0

    def logged(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        return [(e["event"], e["step"], e.get("loss"), e.get("masked_accuracy"), e.get("replaced_f1"))
                for e in map(json.loads, lines)]

    assert logged("whole") == logged("broken")
    for name in ("model_state.pdparams", "pretraining_head.pdparams"):
        whole, resumed = (paddle.load(str(tmp_path / run / "best" / name)) for run in ("whole", "broken"))
        assert all(np.array_equal(whole[k].numpy(), resumed[k].numpy()) for k in whole)
    encoder, report = load_encoder(str(tmp_path / "whole" / "best"))
    assert report.newly_initialised == () and report.loaded == len(encoder.state_dict())


@pytest.mark.slow
def test_pretraining_then_fine_tuning_through_the_commands(tiny_config_args, corpus, tmp_path, capsys):
    args = pretrain_args(tiny_config_args, corpus, tmp_path / "pre", "pretrain.whole_word=true",
                         *OBJECTIVES["mlm"])
    assert main(["pretrain", *args]) == 0
    best = tmp_path / "pre" / "best"
    assert json.loads((tmp_path / "pre" / "results.json").read_text())["dev"]["masked_tokens"] > 0
    args = [a for a in tiny_config_args if not a.startswith(("output_dir=", "model.scratch"))]
    assert main(["train", "--config", DEMO, *overrides([*args, f"output_dir={tmp_path / 'fine'}",
                                                        f"model.backbone={best}", "model.scratch=null"])]) == 0
    assert f"pretrained tensors from {best}; newly initialised: nothing" in capsys.readouterr().out
    continued = pretrain_args(tiny_config_args, corpus, tmp_path / "more", f"model.backbone={best}",
                              "model.scratch=null", "train.max_steps=2", *OBJECTIVES["mlm"])
    assert main(["pretrain", *continued]) == 0
    assert f"from {best}; newly initialised: nothing; the pretraining head too" in capsys.readouterr().out


def test_pretraining_without_a_corpus_or_with_a_classifier_metric_is_one_line(tiny_config_args, corpus, capsys):
    assert main(["pretrain", "--config", DEMO]) == 2
    assert "config key 'pretrain.corpus'" in capsys.readouterr().err
    args = pretrain_args(tiny_config_args, corpus, "/tmp/unused", "train.evaluation.metric=accuracy")
    assert main(["pretrain", *args]) == 2
    assert "set train.evaluation.metric: masked_accuracy" in capsys.readouterr().err
    assert main(["pretrain", *args, "-o", "pretrain.objective=electra"]) == 2
    assert "set train.evaluation.metric: replaced_f1" in capsys.readouterr().err


def test_the_discriminator_is_told_exactly_which_tokens_were_replaced(make_model, tokenizer):
    from paddle_ft.data.features import Features
    from paddle_ft.engine.objectives.electra import ReplacedTokenDetecting
    from paddle_ft.engine.objectives.masked_lm import MaskedLanguageModelling
    from paddle_ft.models.networks import ReplacedTokenDetection

    model = ReplacedTokenDetection(make_model(seed=1).encoder, make_model(seed=2).encoder)
    vocabulary = Vocabulary(len(tokenizer), tokenizer.mask_token_id, frozenset(range(5)))
    objective = ReplacedTokenDetecting(MaskedLanguageModelling(vocabulary, 0, seed=3, rate=0.5))
    ids = [np.array([2, *range(5, 25), 3]), np.array([2, 7, 8, 9, 3])]
    features = Features(ids, [np.zeros_like(x) for x in ids], None)
    import contextlib

    _, _, logits, replaced, real, _, _ = objective._forward(model, features, [0, 1], 0, contextlib.nullcontext)
    assert logits.shape == [2, 22] and real.sum() == 22 + 5  # every real token is judged, no pad
    masked, positions = mask_example(ids[0], vocabulary, np.random.default_rng([3, 0, 0]), 0.5)
    assert set(np.flatnonzero(replaced[0])) <= set(positions)  # only a masked token can have been replaced


def test_a_corpus_too_small_to_train_on_is_one_line(tiny_config_args, tmp_path, capsys):
    lonely = tmp_path / "one.txt"
    lonely.write_text("好棒赞\n", encoding="utf-8")
    assert main(["pretrain", *pretrain_args(tiny_config_args, lonely, tmp_path / "out", *OBJECTIVES["mlm"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config key 'pretrain.corpus'" in err and "all held out" in err


@pytest.mark.parametrize("metric", ["masked_accuracy", "replaced_f1"])
def test_a_classifier_with_a_pretraining_metric_is_refused(metric, tiny_config_args, capsys):
    assert main(["train", "--config", DEMO, *overrides([*tiny_config_args, f"train.evaluation.metric={metric}"])]) == 2
    assert f"'train.evaluation.metric': {metric} is pretraining's" in capsys.readouterr().err


@pytest.mark.slow  # starts the launcher: 2 gloo workers
def test_pretraining_on_two_gloo_workers_is_the_one_process_run(tiny_config_args, corpus, tmp_path):
    """What make pretrain-demo relies on: 2 workers of 8 texts mask and learn as one process of 16 does (no dropout, whose
    draws differ by process, as the demo's pretraining has none)."""
    one = pretrain_args(tiny_config_args, corpus, tmp_path / "one", *OBJECTIVES["mlm"], "model.dropout=0.0")
    assert main(["pretrain", *one]) == 0
    two = pretrain_args(tiny_config_args, corpus, tmp_path / "two", *OBJECTIVES["mlm"], "model.dropout=0.0",
                        "train.batch_size=8")
    command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
               str(tmp_path / "launch"), str(ROOT / "tools" / "pretrain.py"), *two]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (tmp_path / "launch" / "workerlog.0").read_text()[-3000:]

    def logged(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        return [e for e in map(json.loads, lines) if e["event"] in ("train", "eval")]

    one, two = logged("one"), logged("two")
    assert [(e["event"], e["step"]) for e in one] == [(e["event"], e["step"]) for e in two]
    np.testing.assert_allclose([e.get("loss", 0) for e in one], [e.get("loss", 0) for e in two], atol=1e-5)
    assert [e.get("masked_accuracy") for e in one] == [e.get("masked_accuracy") for e in two]
    a, b = (paddle.load(str(tmp_path / run / "best" / "model_state.pdparams")) for run in ("one", "two"))
    assert max(float(np.abs(a[k].numpy() - b[k].numpy()).max()) for k in a) < 1e-5


@pytest.mark.parametrize("corpus_text, vocab_drop, fragment", [
    (None, "[MASK]", "'model.scratch.vocab_file': the vocabulary of {vocab} lacks the special token(s) [MASK]"),
    ("[SEP]\n[CLS]\n[SEP] [CLS]\n[MASK]\n", None, "'pretrain.corpus': its training texts hold no token to mask"),
    ("好棒\n\u200b\u200b\n差\n", None, "{corpus}:2: the text holds no character the model reads"),
    ("好棒\n" + "好某某某某某某某某某\n" * 3, None, "'pretrain.corpus': 84% of its tokens are [UNK] (more than 30%)")])
def test_a_vocabulary_or_corpus_pretraining_cannot_learn_from_is_one_line(corpus_text, vocab_drop, fragment,
                                                                          tiny_config_args, corpus, tmp_path, capsys):
    """Issue 27, roots 4 and 6: a [MASK] that would silently be [UNK], a line with nothing to mask (it trained at
    loss 0, then divided by zero), a vocabulary that does not cover the text."""
    vocab = Path(next(a for a in tiny_config_args if a.startswith("model.scratch.vocab_file=")).split("=", 1)[1])
    if vocab_drop:
        vocab = tmp_path / "vocab.txt"
        vocab.write_text("".join(line + "\n" for line in Path(next(a for a in tiny_config_args if a.startswith(
            "model.scratch.vocab_file=")).split("=", 1)[1]).read_text().splitlines() if line != vocab_drop))
    if corpus_text is not None:
        corpus = tmp_path / "bad.txt"
        corpus.write_text(corpus_text, encoding="utf-8")
    args = pretrain_args(tiny_config_args, corpus, tmp_path / "out", *OBJECTIVES["mlm"],
                         f"model.scratch.vocab_file={vocab}")
    assert main(["pretrain", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment.format(vocab=vocab, corpus=corpus) in err, err


def test_a_line_of_millions_of_characters_is_cut_before_it_is_tokenised(tokenizer):
    from paddle_ft.data.corpus import pretraining_features
    from paddle_ft.text import CHARACTERS_PER_TOKEN

    calls = []

    def spy(texts, **options):
        calls.append([len(t) for t in texts])
        return tokenizer(texts, **options)

    features = pretraining_features(["好" * 4_900_000, "差坏"], spy, 64, whole_word=False)
    assert calls == [[64 * CHARACTERS_PER_TOKEN, 2]] and [len(x) for x in features.input_ids] == [64, 4]


def test_an_empty_corpus_list_is_named_as_the_corpus_not_as_an_evaluation_setting(capsys):
    # issue 43, root 8: with no dev file the evaluation rule fired first and blamed train.evaluation.every
    assert main(["pretrain", "--config", DEMO, "-o", "pretrain.corpus=[]", "-o", "data.dev=null",
                 "-o", "train.evaluation.every=50"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config key 'pretrain.corpus' (from -o): is an empty list" in err
