"""`paddle_ft distill`: the soft loss is Hinton's, a student learns from a trained teacher (unlabeled text
included), and a student that cannot read the teacher's token ids or labels is a one-line error."""
import json

import numpy as np
import paddle
import pytest

from paddle_ft.engine.losses import distillation_loss
from paddle_ft.errors import ConfigError
from conftest import DEMO, SPECIAL_TOKENS, overrides, synthetic_rows, write_splits, write_vocab


def test_the_loss_is_soft_kl_times_t_squared_plus_hard_cross_entropy_where_labelled():
    rng = np.random.default_rng(0)
    student, teacher = rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=(3, 4)).astype("float32")
    labels, t, alpha = np.array([2, -1, 0]), 3.0, 0.7

    def softmax(z):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    p_teacher, p_student = softmax(teacher / t), softmax(student / t)
    kl = (p_teacher * np.log(p_teacher / p_student)).sum(axis=1)
    hard = np.array([-np.log(softmax(student)[0, 2]), 0.0, -np.log(softmax(student)[2, 0])])  # row 1: unlabeled
    expected = (alpha * t ** 2 * kl + (1 - alpha) * hard).sum()
    actual = distillation_loss(paddle.to_tensor(student), paddle.to_tensor(teacher), paddle.to_tensor(labels), t, alpha)
    assert float(actual) == pytest.approx(expected, rel=1e-5)


SHAPE = ["model.scratch.num_heads=2", "model.scratch.max_position_embeddings=64", "data.max_length=64",
         "train.batch_size=16", "train.optimizer.learning_rate=2e-3"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(folder with train/dev/test/unlabeled files and a vocabulary, a trained teacher's best/)."""
    from paddle_ft.cli import main

    root = write_splits(tmp_path_factory.mktemp("distill"), (300, 100, 200))
    vocab = write_vocab(root / "vocab.txt")
    (root / "unlabeled.txt").write_text("\n".join(t for t, _ in synthetic_rows(200, 4)) + "\n", encoding="utf-8")
    args = [f"output_dir={root / 'teacher'}", *_data(root), f"model.scratch.vocab_file={vocab}",
            "model.scratch.hidden_size=64", "model.scratch.num_layers=2", "model.scratch.intermediate_size=128",
            "train.epochs=4", *SHAPE]
    assert main(["train", "--config", DEMO, *overrides(args)]) == 0
    return root, root / "teacher" / "best"


def _data(root):
    return [f"data.{s}={root / s}.tsv" for s in ("train", "dev", "test")]


def test_a_small_student_learns_from_the_teacher_and_unlabeled_text(corpus, capsys):
    from paddle_ft.cli import main

    root, teacher = corpus
    student = [*_data(root), f"model.scratch.vocab_file={teacher / 'vocab.txt'}", "model.scratch.hidden_size=16",
               "model.scratch.num_layers=1", "model.scratch.intermediate_size=32", "train.epochs=4", *SHAPE]
    assert main(["distill", "--teacher", str(teacher), "--config", DEMO,
                 *overrides([f"output_dir={root / 'student'}", f"distill.unlabeled=[{root / 'unlabeled.txt'}]",
                             *student])]) == 0
    out = capsys.readouterr().out
    assert "distillation: 200 unlabeled texts learnt from the teacher alone" in out
    assert "plan: 500 training examples" in out  # 300 labelled + 200 unlabeled rows
    results = json.loads((root / "student" / "results.json").read_text(encoding="utf-8"))
    teacher_results = json.loads((teacher.parent / "results.json").read_text(encoding="utf-8"))
    assert teacher_results["test"]["accuracy"] > 0.9
    assert results["test"]["accuracy"] >= 0.95 * teacher_results["test"]["accuracy"], (results, teacher_results)
    config = (root / "student" / "config.yaml").read_text(encoding="utf-8")
    assert f"teacher: {teacher}" in config  # a resume needs no --teacher
    manifest = json.loads((root / "student" / "best" / "manifest.json").read_text(encoding="utf-8"))
    assert {split: entry["rows"] for split, entry in manifest["data"].items()} == \
        {"train": 300, "dev": 100, "test": 200, "unlabeled-1": 200}
    assert main(["export", "--model", str(root / "student" / "best"), "--output", str(root / "student-export")]) == 0


@pytest.mark.parametrize("extra, message", [
    (["model.scratch.vocab_file={vocab}"], "'model.scratch.vocab_file'.*the student's vocabulary is not the teacher's"),
    (["data.labels=[正面, 负面]"], r"'data.labels'.*the student's labels \['正面', '负面'\] are not the teacher's"),
    (["train.class_weights=auto"], "'train.class_weights'.*distillation is single-label cross-entropy"),
    # issue 27, root 4: a teacher that reads texts otherwise than its student
    (["data.text_pair_column=text"], r"'data.text_pair_column'.*read texts differently \(data.text_pair_column: none, "
                                     r"set, teacher first\)"),
    (["data.truncation=tail"], r"'data.truncation'.*read texts differently \(data.truncation: head, tail"),
    (["data.max_length=96", "model.scratch.max_position_embeddings=128"],
     r"'data.max_length'.*is 96, but the teacher .* reads at most 64 tokens"),
])
def test_a_student_that_cannot_learn_from_this_teacher_is_one_line(corpus, tmp_path, extra, message):
    from paddle_ft.workflows import distillation as distill

    root, teacher = corpus
    other_vocab = tmp_path / "vocab.txt"
    other_vocab.write_text("\n".join([*SPECIAL_TOKENS, *"好差的了"]) + "\n", encoding="utf-8")
    args = [f"output_dir={tmp_path / 'student'}", *_data(root), f"model.scratch.vocab_file={teacher / 'vocab.txt'}",
            *SHAPE, *(e.format(vocab=other_vocab) for e in extra)]
    with pytest.raises(ConfigError, match=message):
        distill.distill(DEMO, args, str(teacher))


def test_distillation_without_a_teacher_says_how_to_give_one():
    from paddle_ft.workflows import distillation as distill

    with pytest.raises(ConfigError, match="'distill.teacher'.*pass --teacher OUT/best"):
        distill.distill(DEMO, [], None)


def test_a_multi_label_or_pair_teacher_reads_texts_otherwise_than_a_single_text_student():
    """Issue 27, root 4: the whole metadata is compared, not the label names alone."""
    from conftest import tiny_meta

    student = tiny_meta()
    assert tiny_meta(task="multi_label").reads_differently_from(student) == ["task: multi_label, single_label"]
    assert tiny_meta(text_pair_column="second").reads_differently_from(student) == ["data.text_pair_column: set, none"]
    assert tiny_meta(truncation="head_tail", head_tokens=20).reads_differently_from(
        tiny_meta(truncation="head_tail", head_tokens=30)) == ["data.head_tokens: 20, 30"]
    assert student.reads_differently_from(tiny_meta()) == []


def test_each_rank_scores_its_share_of_the_teacher_pass_and_every_rank_gets_all_of_it(make_model, tokenizer,
                                                                                       monkeypatch):
    """Issue 28: every rank scored the whole training set with the teacher. Two ranks simulated in one process: each
    scores rows rank::2 only, and the gathered logits equal one process's, row for row."""
    from conftest import features_of
    from paddle_ft.engine import evaluate
    from paddle_ft.engine.objectives import distill
    from paddle_ft.engine.distributed import Distributed

    teacher = make_model(seed=4)
    features = features_of(synthetic_rows(7, seed=2), tokenizer)
    alone = evaluate.predict_logits(teacher, features, 3, tokenizer.pad_token_id)
    scored = []
    real = evaluate.predict_logits
    monkeypatch.setattr(distill, "predict_logits",
                        lambda *a, subset, **k: scored.append(list(subset)) or real(*a, subset=subset, **k))

    class TwoRanks(Distributed):
        def gather(self, part):  # the other rank's part, as it would have computed it
            other = real(teacher, features, 3, tokenizer.pad_token_id, subset=np.arange(1 - self.rank, 7, 2))
            return [part, other] if self.rank == 0 else [other, part]

    for rank in (0, 1):
        logits = distill.teacher_logits_of(teacher, features, 3, tokenizer.pad_token_id, TwoRanks(rank, 2))
        np.testing.assert_allclose(logits, alone, atol=1e-6)
    assert scored == [[0, 2, 4, 6], [1, 3, 5]]


def test_the_teacher_is_let_go_before_the_student_trains(corpus, tmp_path, monkeypatch):
    """Issue 46: the teacher stayed on the GPU, in float32, for the whole run, though its answers are computed once
    before training. Here: nothing holds the teacher's model when the engine starts, and the pass ran under the
    run's autocast."""
    import gc
    import weakref

    from paddle_ft.artifacts import bundle as bundles
    from paddle_ft.engine.objectives import distill as objective
    from paddle_ft.workflows import distillation as distill
    from paddle_ft.workflows import session

    loaded, autocasts, alive = [], [], []
    real_load, real_logits, real_engine = bundles.load_bundle, objective.teacher_logits_of, session.run_engine

    def load(path):
        bundle = real_load(path)
        loaded.append(weakref.ref(bundle.model))
        return bundle

    def logits(*args, **kwargs):
        autocasts.append(args[5] if len(args) > 5 else kwargs.get("autocast"))
        return real_logits(*args, **kwargs)

    def engine(*args, **kwargs):
        gc.collect()
        alive.append(loaded[0]() is not None)
        return real_engine(*args, **kwargs)

    monkeypatch.setattr(distill, "load_bundle", load)
    monkeypatch.setattr(distill, "teacher_logits_of", logits)
    monkeypatch.setattr(distill, "run_engine", engine)
    root, teacher = corpus
    args = [f"output_dir={tmp_path / 'student'}", *_data(root), f"model.scratch.vocab_file={teacher / 'vocab.txt'}",
            "model.scratch.hidden_size=16", "model.scratch.num_layers=1", "model.scratch.intermediate_size=32",
            "train.max_steps=2", *SHAPE]
    assert distill.distill(DEMO, args, str(teacher)) is not None
    assert alive == [False] and len(autocasts) == 1 and callable(autocasts[0])
