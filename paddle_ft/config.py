"""Run configuration: a tree of frozen dataclasses loaded from YAML plus `-o key=value` overrides.

Every key is checked once, here, at load time: an unknown key, a wrong type, an out-of-range value or
settings that contradict one another raise `ConfigError` naming the dotted key (and the YAML line, or
`-o`, it came from); several problems are reported together (`ConfigErrors`), one line each.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from paddle_ft.errors import ConfigError, ConfigErrors, UserError
from paddle_ft.io import write_text_atomically
from paddle_ft.text import HEADS, POOLINGS, TASKS, TRUNCATIONS, WINDOW_POOLINGS

ARCHITECTURES = ("bert", "ernie", "roberta")
# the dev metrics that can pick a model, per kind of run (all: higher is better)
TASK_METRICS = {"single_label": ("accuracy", "macro_f1"), "multi_label": ("micro_f1", "macro_f1", "subset_accuracy"),
                "pretraining": ("masked_accuracy", "replaced_f1")}
METRICS = tuple(dict.fromkeys(m for metrics in TASK_METRICS.values() for m in metrics))
LOSSES = ("cross_entropy", "focal")
CALIBRATIONS = ("none", "temperature")


def _check(test: Callable[[Any], bool], expected: str) -> dict:
    """Field metadata: a range/choice test and the phrase printed when it fails."""
    return {"check": test, "expected": expected}


def _positive(kind=int) -> dict:
    return _check(lambda v: v > 0, f"a positive {kind.__name__}")


def _one_of(*choices) -> dict:
    return _check(lambda v: v in choices, "one of " + ", ".join(map(str, choices)))


AUGMENTATIONS = ("swap", "delete", "insert")


@dataclass(frozen=True)
class AugmentConfig:
    """Extra training rows made by editing training texts (EDA's operations that need no downloaded resources)."""

    copies: int = field(default=0, metadata=_check(lambda v: 0 <= v <= 20, "an integer from 0 to 20 (EDA's authors "
                                                                          "found no gain past 16 copies)"))
    """Edited copies of each training row (0 = no augmentation); dev and test are never touched."""
    operations: tuple[str, ...] = field(default=AUGMENTATIONS, metadata=_check(
        lambda v: len(v) > 0 and set(v) <= set(AUGMENTATIONS), "a non-empty list of " + ", ".join(AUGMENTATIONS)))
    """Each copy is made by one of these, picked at random: swap two characters, delete some, or insert copies of
    the text's own characters (EDA's insertion of synonyms, without a synonym dictionary offline)."""
    rate: float = field(default=0.1, metadata=_check(lambda v: 0 < v < 1, "a number in (0, 1)"))
    """Share of a text's characters an operation changes (at least one)."""


@dataclass(frozen=True)
class DataConfig:
    """Where the examples are and how to read them."""

    train: str | None = None
    """Training file; required for `train`."""
    dev: str | None = None
    """Dev file: evaluated during training, picks the best checkpoint."""
    test: str | None = None
    """Optional test file, scored once with the best model."""
    format: str | None = field(default=None, metadata=_one_of("tsv", "csv", "jsonl"))
    """File format of all splits; null = each file's extension says (.tsv, .csv, .jsonl; any other is read as tsv)."""
    header: bool = True
    """TSV and CSV: the first row names the columns. false: every row is data, and the columns are named by their
    position, "1", "2", ... (text_column: "2" for the second)."""
    text_column: str = "text"
    """Column (or JSONL key) holding the text."""
    text_pair_column: str | None = None
    """Second text for sentence-pair tasks; null for single-text classification."""
    label_column: str = "label"
    """Column (or JSONL key) holding the label name (task multi_label: the label names)."""
    label_delimiter: str = field(default=",", metadata=_check(lambda v: bool(v) and not v.isspace() and "\t" not in v,
                                                              "a non-blank string without a tab"))
    """Task multi_label: what separates a row's label names in its label column ("体育,财经"); a JSONL row may
    give a list instead (["体育", "财经"])."""
    label_hierarchy: str | None = field(default=None, metadata=_check(
        lambda v: v is None or (bool(v) and not v.isspace() and "\t" not in v),
        "null or a non-blank string without a tab"))
    """What separates the levels of labels written as paths of a tree ("/" for 电子/手机); null = flat labels. The
    model is one softmax (multi_label: a sigmoid per label) over the leaves, so every answer is a path of the tree;
    eval scores each level and abstaining answers the parent when the leaf is unsure (docs/tasks.md)."""
    allow_no_label: bool = False
    """Task multi_label: a row with an empty label set is a text that has none of the labels (when false it is
    a bad row, as an empty label usually means a row someone forgot to label)."""
    labels: tuple[str, ...] | str | None = None
    """Label names as a list, a file with one name per line, or null to take them from train."""
    label_descriptions: str | None = None
    """A file of a label name, a tab and a short description per line (model.head prototype): each class's
    prototype starts as its description's embedding; with no data.train that is the whole model (zero-shot)."""
    corrections: str | None = None
    """A review file `label-issues` wrote, its decision column filled in (keep, accept, drop or a label): the labels
    it changes and the rows it drops are applied to train and dev as they are read (docs/analysis.md)."""
    max_length: int = field(default=128, metadata=_check(lambda v: v >= 8, "an integer >= 8"))
    """Tokens per example after truncation, [CLS] and [SEP] included."""
    truncation: str = field(default="head", metadata=_one_of(*TRUNCATIONS))
    """What becomes of a text longer than max_length, in training and in the exported model alike: its first
    tokens are kept (head), its last (tail), its first head_tokens and the rest from its end (head_tail), or
    all of it, in overlapping windows whose answers are pooled (sliding_window)."""
    head_tokens: int = field(default=64, metadata=_positive())
    """With truncation head_tail: how many of the kept tokens come from the text's beginning."""
    stride: int = field(default=64, metadata=_positive())
    """With truncation sliding_window: tokens between the starts of a long text's windows of max_length (each
    window carries the text's label in training)."""
    window_pooling: str = field(default="mean", metadata=_one_of(*WINDOW_POOLINGS))
    """With truncation sliding_window: how the windows' logits make the text's one answer."""
    on_bad_row: str = field(default="error", metadata=_one_of("error", "skip"))
    """`error` stops at the first bad row; `skip` drops bad rows and reports how many."""
    group_by_length: bool = True
    """Batch examples of similar length together (shuffled in chunks) so padding costs little."""
    augment: AugmentConfig = AugmentConfig()
    """Augmentation of the training split (copies 0: off)."""
    cache_dir: str | None = "~/.cache/paddle_ft/features"
    """Token ids of each split are cached here (keyed by texts, tokenizer and max_length); null = no cache."""


@dataclass(frozen=True)
class ScratchConfig:
    """A randomly initialised encoder, for offline training without a pretrained checkpoint."""

    vocab_file: str = ""
    """WordPiece vocabulary, one token per line."""
    architecture: str = field(default="bert", metadata=_one_of(*ARCHITECTURES))
    """Encoder family: bert, ernie or roberta."""
    hidden_size: int = field(default=256, metadata=_positive())
    """Width of every layer."""
    num_layers: int = field(default=4, metadata=_positive())
    """Transformer layers."""
    num_heads: int = field(default=4, metadata=_positive())
    """Attention heads per layer; must divide hidden_size."""
    intermediate_size: int = field(default=1024, metadata=_positive())
    """Width of the feed-forward layer inside each transformer layer."""
    max_position_embeddings: int = field(default=512, metadata=_positive())
    """Longest input the encoder takes; data.max_length may not exceed it."""


@dataclass(frozen=True)
class ModelConfig:
    """The encoder and the classification head."""

    backbone: str | None = None
    """A PaddleNLP model name (downloads), a local PaddleNLP folder, or a local Hugging Face folder (BERT,
    RoBERTa, ERNIE; converted once into `cache_dir`); null = `scratch`."""
    scratch: ScratchConfig | None = None
    """Random-init encoder settings, used when `backbone` is null."""
    pooling: str = field(default="pooler", metadata=_one_of(*POOLINGS))
    """The text's vector: pooler (the checkpoint's pooler over [CLS]), cls (the [CLS] hidden state) or mean (of
    the non-pad hidden states); cls and mean need no pooler weights."""
    head: str = field(default="linear", metadata=_one_of(*HEADS))
    """The classifier: linear (a new layer), or prototype: a vector per class in the encoder's embedding space,
    scored by cosine times a learned scale, started from data.label_descriptions (zero-shot: no data.train) or from
    the training rows' mean (few-shot); classes can be added to a trained one (add-class)."""
    text_prefix: str = ""
    """Put before every text the model reads (training, eval, export, predict, serve): an embedding model's
    instruction, as multilingual-e5's "query: "."""
    dropout: float = field(default=0.1, metadata=_check(lambda v: 0 <= v < 1, "a number in [0, 1)"))
    """Dropout before the classifier (and, for a scratch encoder without encoder_dropout, inside it)."""
    encoder_dropout: float | None = field(default=None, metadata=_check(lambda v: 0 <= v < 1, "a number in [0, 1)"))
    """Hidden and attention dropout inside the encoder; null = the checkpoint's own."""
    freeze_embeddings: bool = False
    """Keep the embeddings as pretrained: no gradient, no optimizer state."""
    freeze_layers: int = field(default=0, metadata=_check(lambda v: v >= 0, "an integer >= 0"))
    """Keep the first N encoder layers as pretrained (with freeze_embeddings, the bottom of the model)."""
    cache_dir: str = "~/.cache/paddle_ft/backbones"
    """Hugging Face checkpoints converted to PaddleNLP are kept here, one folder per checkpoint content."""


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW and its learning-rate schedule (linear warmup, then linear decay to 0)."""

    learning_rate: float = field(default=2e-5, metadata=_positive(float))
    """Peak learning rate of AdamW, reached after warmup, then decayed linearly to 0."""
    warmup: float = field(default=0.1, metadata=_check(lambda v: v >= 0, "a number >= 0"))
    """Warmup as a proportion of optimizer steps (< 1) or a number of steps (>= 1)."""
    weight_decay: float = field(default=0.01, metadata=_check(lambda v: v >= 0, "a number >= 0"))
    """AdamW weight decay, applied to every weight but biases and norm weights."""
    max_grad_norm: float | None = field(default=1.0, metadata=_positive(float))
    """Global-norm clipping threshold; null turns clipping off."""
    layer_lr_decay: float = field(default=1.0, metadata=_check(lambda v: 0 < v <= 1, "a number in (0, 1]"))
    """Layer-wise learning-rate decay: encoder layer l of L learns at lr x decay^(L - l), the embeddings at
    lr x decay^L; 1 = one rate for all."""
    head_learning_rate: float | None = field(default=None, metadata=_positive(float))
    """Peak learning rate of the classifier head (e.g. 2e-4 beside an encoder's 2e-5); null = learning_rate."""


@dataclass(frozen=True)
class AmpConfig:
    """Mixed precision: Paddle's AMP on a GPU; bfloat16 matmuls on a CPU that has bfloat16 arithmetic."""

    enabled: bool | str = field(default="auto", metadata=_check(lambda v: isinstance(v, bool) or v == "auto",
                                                                "true, false or auto"))
    """true: mixed precision. On a GPU, Paddle's auto_cast at `level`. On a CPU with AVX512-BF16 or AMX, dtype
    bfloat16 runs the linear layers' matmuls in bfloat16 on oneDNN (weights, activations, gradients and updates stay
    float32; `level` changes nothing there), and is refused on a CPU without; float16 on a CPU changes nothing.
    auto: on a CPU with bfloat16 arithmetic, bfloat16 matmuls for a model at least 256 wide (where they pay:
    docs/performance.md), float32 otherwise, said in one line at the start; float32 on a GPU. false: float32."""
    level: str = field(default="O1", metadata=_one_of("O1", "O2"))
    """O1: low-precision ops by Paddle's lists; O2: weights in low precision with float32 master copies."""
    dtype: str = field(default="float16", metadata=_one_of("float16", "bfloat16"))
    """float16 (compute capability 7.0+, loss-scaled) or bfloat16 (8.0+)."""
    init_loss_scaling: float = field(default=32768.0, metadata=_positive(float))
    """First loss scale of the dynamic scaler (float16 only; bfloat16 needs no scaling)."""
    tf32: bool | None = None
    """float32 matmuls on the GPU in TF32 (Ampere and newer: a 10-bit mantissa, ~1e-3 relative error, several
    times faster), with or without `enabled`. null: as Paddle has it (on: phi's context pool starts with
    allow_tf32_cublas true); false turns it off for float32-exact GPU matmuls, true turns it on."""


@dataclass(frozen=True)
class EvaluationConfig:
    """Scoring on dev during training: when, how, and what counts as better."""

    every: int = field(default=0, metadata=_check(lambda v: v >= 0, "an integer >= 0"))
    """Evaluate every N optimizer steps; 0 = only at each epoch end."""
    batch_size: int = field(default=64, metadata=_positive())
    """Examples per batch when scoring dev and test."""
    metric: str = field(default="accuracy", metadata=_one_of(*METRICS))
    """Dev metric that picks the best model and drives early stopping."""
    early_stopping_patience: int = field(default=0, metadata=_check(lambda v: v >= 0, "an integer >= 0"))
    """Stop after this many evaluations without improvement; 0 = never."""


@dataclass(frozen=True)
class DecisionConfig:
    """When a single-label model answers, and when it abstains so that a person decides ("转人工")."""

    target_coverage: float | None = field(default=None, metadata=_check(lambda v: 0 < v <= 1, "a share in (0, 1]"))
    """Fit on dev the confidence (top probability, after calibration) below which the model abstains, so that it
    answers this share of texts (0.8 = 80%); saved with the model and applied by eval, export, predict, the Python API
    and the server, which answer such a text with its top label and "abstained": true. null = always answer."""
    abstain_below: float | None = field(default=None, metadata=_check(lambda v: 0 <= v <= 1,
                                                                      "a probability from 0 to 1"))
    """Abstain below this fixed confidence instead of one fitted to target_coverage; null = none."""


@dataclass(frozen=True)
class CheckpointsConfig:
    """What `checkpoints/` keeps, for `train.resume`."""

    every: int = field(default=0, metadata=_check(lambda v: v >= 0, "an integer >= 0"))
    """Also checkpoint every N optimizer steps; 0 = only at evaluations and epoch ends."""
    keep: int = field(default=2, metadata=_check(lambda v: v >= 0, "an integer >= 0"))
    """Newest step checkpoints kept, besides the best one; 0 = no checkpoint at all (a run that cannot be resumed:
    for measurements, where writing gigabytes of optimizer state would be most of the time)."""


@dataclass(frozen=True)
class RuntimeConfig:
    """How the host runs the loop; never changes the numbers a run computes."""

    log_every: int = field(default=20, metadata=_positive())
    """Log loss, lr and speed every N optimizer steps."""
    cpu_threads: int | None = field(default=None, metadata=_positive())
    """CPU math threads per process; null = OMP_NUM_THREADS if set, else the usable cores / processes per host."""
    fast_cpu_linear: bool = True
    """On CPU, compute the gradients of linear layers with matmuls only (same values, ~1.2x faster steps)."""
    fused_kernels: bool = True
    """On CPU, run attention's core, layer norms, GELU, dropout, the linears' biases, gradient clipping and AdamW's
    update through paddle_ft's fused C++ kernels (built once on first use; the same values to 1e-5 and the same
    dropout masks; 1.4-1.7x faster steps, more at e5-small's shape; Paddle's kernels where no compiler is)."""
    recompute: bool = False
    """Recompute each encoder layer's activations in backward instead of keeping them (less memory, ~1/3
    more compute)."""
    packed_batches: bool = False
    """On CPU with the fused kernels, a single-label training batch's texts side by side in one row with no padding,
    positions restarting and attention inside each text: each text gets the logits and gradients it gets alone
    (dropout draws its masks in another order). Off by default: at e5-small's shape it trained 0.90-0.94x as fast
    as length grouping, which pads only ~2% of the tokens (docs/performance.md)."""
    write_report: bool = False
    """Also write report.html as the run ends (charts, the data summary, the most confident mistakes explained), as
    `python -m paddle_ft report OUT` does afterwards. Off by default: at multilingual-e5-small's size it costs another
    pass over test, one over as many training texts and three explanations (3.5 minutes and 1.6 GB for the demo's
    1,736 test texts on 2 cores). label-issues keeps it off for its folds unless asked (--fold-reports)."""


@dataclass(frozen=True)
class FewShotConfig:
    """train.recipe few_shot: contrastive tuning on pairs of training rows (SetFit's recipe)."""

    iterations: int = field(default=20, metadata=_positive())
    """Passes over the training rows per epoch: each batch pairs every two of its rows (same class: cosine
    pulled to 1, different: to 0), so a pass over few rows sees new pairs each time."""


@dataclass(frozen=True)
class TrainConfig:
    """The optimisation loop: how long, how big a step, and its sub-sections."""

    recipe: str = field(default="fine_tune", metadata=_one_of("fine_tune", "few_shot"))
    """fine_tune: the loss of the labels; few_shot (model.head prototype, a few rows per class): contrastive
    tuning of the encoder on pairs of training rows, each class's prototype the mean of its rows (train.few_shot)."""
    epochs: int = field(default=3, metadata=_positive())
    """Passes over the training data."""
    max_steps: int | None = field(default=None, metadata=_positive())
    """When set, stop after this many optimizer steps, whatever `epochs` says."""
    batch_size: int = field(default=32, metadata=_positive())
    """Examples per micro-batch (per device)."""
    accumulate_steps: int = field(default=1, metadata=_positive())
    """Micro-batches per optimizer step."""
    max_nonfinite_steps: int = field(default=5, metadata=_positive())
    """Stop when the loss is NaN/inf this many steps in a row (such steps never update the weights)."""
    resume: str | None = None
    """`auto` = the newest complete checkpoint in output_dir; or a checkpoints/step-N path; null = new run."""
    loss: str = field(default="cross_entropy", metadata=_one_of(*LOSSES))
    """cross_entropy, or focal: cross-entropy x (1 - p of the gold label)^focal_gamma, which turns the loss of
    examples the model already gets right down (for a rare class among many easy ones)."""
    focal_gamma: float = field(default=2.0, metadata=_check(lambda v: v >= 0, "a number >= 0"))
    """The focusing exponent of the focal loss (0 = cross-entropy; 2 is the usual)."""
    level_loss: float = field(default=0.0, metadata=_check(lambda v: v >= 0, "a number >= 0"))
    """With data.label_hierarchy (single_label): each upper level's cross-entropy, of the sum of its leaves'
    probabilities, added x this weight to the leaves' (0 = the leaves' only; docs/tasks.md measures both)."""
    class_weights: str | tuple[float, ...] | None = field(default=None, metadata=_check(
        lambda v: v == "auto" if isinstance(v, str) else len(v) > 0 and all(w > 0 for w in v),
        "auto or a list of positive numbers, one per label"))
    """Per-class weights of each example's loss: `auto` = inverse class frequency in the training data (in its
    windows, with data.truncation sliding_window), normalised so the average training example weighs 1; or one
    positive weight per label, in data.labels order; null = all 1."""
    calibration: str = field(default="none", metadata=_one_of(*CALIBRATIONS))
    """single_label: temperature = fit one temperature on dev that makes the probabilities as sure as the model
    is right (the predicted labels do not change), saved with the model and applied by eval, export and predict;
    none = the softmax as trained."""
    few_shot: FewShotConfig = FewShotConfig()
    """The few_shot recipe's settings."""
    optimizer: OptimizerConfig = OptimizerConfig()
    """AdamW, clipping and the learning-rate schedule."""
    amp: AmpConfig = AmpConfig()
    """Automatic mixed precision."""
    evaluation: EvaluationConfig = EvaluationConfig()
    """Dev evaluation, model selection and early stopping."""
    decision: DecisionConfig = DecisionConfig()
    """When the model answers and when it abstains."""
    checkpoints: CheckpointsConfig = CheckpointsConfig()
    """Checkpoint cadence and rotation."""
    runtime: RuntimeConfig = RuntimeConfig()
    """Logging cadence and CPU settings."""


@dataclass(frozen=True)
class PretrainConfig:
    """Masked-language-model pretraining on unlabeled text (`python tools/pretrain.py`)."""

    corpus: tuple[str, ...] | None = None
    """Unlabeled text files: .txt (one text per line) or the text column of .tsv/.csv/.jsonl (null: no pretraining;
    an empty list is refused, being surely a list someone forgot to fill)."""
    text_column: str = "text"
    """Column (or JSONL key) of the text in .tsv/.csv/.jsonl corpus files."""
    heldout: float = field(default=0.02, metadata=_check(lambda v: 0 < v < 0.5, "a number in (0, 0.5)"))
    """Share of the corpus held out to report masked-token accuracy and perplexity (and pick best/)."""
    mask_rate: float = field(default=0.15, metadata=_check(lambda v: 0 < v < 1, "a number in (0, 1)"))
    """Share of the tokens predicted: 80% of them shown as [MASK], 10% as a random token, 10% unchanged."""
    whole_word: bool = False
    """Mask whole words (jieba segments the text), as the Chinese wwm models are trained."""
    objective: str = field(default="mlm", metadata=_one_of("mlm", "electra"))
    """mlm: predict the masked tokens (metric masked_accuracy); electra: a small generator fills them in and
    the encoder learns to tell, for every token, whether it was replaced (metric replaced_f1)."""
    generator_layers: int = field(default=1, metadata=_positive())
    """Layers of ELECTRA's generator (same width as the encoder, embeddings shared)."""


@dataclass(frozen=True)
class DistillConfig:
    """Knowledge distillation into a smaller student (`python -m paddle_ft distill`)."""

    teacher: str | None = None
    """The teacher: a trained model folder (OUT/best); `distill --teacher` sets it."""
    temperature: float = field(default=2.0, metadata=_positive(float))
    """Both models' logits are divided by it before the soft loss: above 1 the teacher's second choices show."""
    alpha: float = field(default=0.5, metadata=_check(lambda v: 0 <= v <= 1, "a number in [0, 1]"))
    """Weight of the soft loss (KL divergence to the teacher, x temperature^2); 1 - alpha weighs the labels'."""
    unlabeled: tuple[str, ...] = ()
    """Unlabeled text files (.txt, or the text column of .tsv/.csv/.jsonl) the student also learns from, by the
    soft loss alone."""


@dataclass(frozen=True)
class Config:
    output_dir: str = field(default="out/run", metadata=_check(lambda v: bool(v.strip()), "a folder path"))
    """Folder of the run: config, metrics, checkpoints, best/ and results."""
    task: str = field(default="single_label", metadata=_one_of(*TASKS))
    """single_label: one label per text (softmax); multi_label: any set of the labels per text (a sigmoid per
    label, each with its own threshold tuned on dev)."""
    seed: int = field(default=42, metadata=_check(lambda v: 0 <= v < 2**32, "an integer from 0 to 2**32 - 1"))
    """Seeds python, numpy and paddle: the same seed gives the same run."""
    data: DataConfig = DataConfig()
    """The data files and how to read them."""
    model: ModelConfig = ModelConfig()
    """The encoder and the classification head."""
    train: TrainConfig = TrainConfig()
    """The optimisation loop."""
    pretrain: PretrainConfig = PretrainConfig()
    """Pretraining on unlabeled text; read by `pretrain` only."""
    distill: DistillConfig = DistillConfig()
    """Distillation from a teacher; read by `distill` only."""


# ----------------------------------------------------------------------------- loading


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Read YAML at `path` (or start from defaults), apply `key=value` overrides, validate."""
    raw: dict = {}
    lines: dict[str, int] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"config file {path} does not exist: pass an existing YAML file to --config")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}: not UTF-8 (byte {exc.start}); save the config as UTF-8") from None
        try:
            raw = yaml.load(text, Loader=_UniqueKeyLoader) or {}
            lines = _key_lines(yaml.compose(text, Loader=_UniqueKeyLoader))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f"{path}:{mark.line + 1}" if mark else str(path)
            raise UserError(f"{at}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        except RecursionError:
            raise UserError(f"{path}: nested too deeply to be a paddle_ft config") from None
        except ValueError:  # an integer of more digits than Python converts
            raise UserError(f"{path}: a number has more digits than can be read; fix it") from None
        if not isinstance(raw, dict):
            raise UserError(f"{path}: the top level must be a mapping of config keys")
    overridden = set()
    for item in overrides:
        key, value = parse_override(item)
        set_dotted(raw, key, value)
        overridden.add(key)

    def where(key: str) -> str:
        if key in overridden:
            return "from -o"
        return f"{path}:{lines[key]}" if key in lines else (str(path) if path else "")

    problems: list[ConfigError] = []
    config = _build(Config, raw, "", where, problems)
    if not problems:  # a field left at its default after a problem would only add false contradictions
        problems = _cross_field_problems(config, where)
    if problems:
        raise problems[0] if len(problems) == 1 else ConfigErrors(problems)
    return config


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; a config that says two things about one key is refused."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key '{key}' appears twice in one section",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def config_to_dict(config) -> dict:
    """Plain dict of a config tree (tuples become lists), ready for YAML/JSON."""
    def plain(value):
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return plain(dataclasses.asdict(config))


def flat_config(tree: dict, prefix: str = "") -> dict:
    """{"model.scratch.num_layers": 2, ...} from the nested dict of a config (`config_to_dict`)."""
    flat = {}
    for name, value in tree.items():
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{prefix}{name}."))
        else:
            flat[prefix + name] = value
    return flat


def save_config(config: Config, path: Path) -> None:
    write_text_atomically(path, yaml.safe_dump(config_to_dict(config), allow_unicode=True, sort_keys=False))


def parse_override(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise UserError(f"override '{_clip(item, 60)}' is not KEY=VALUE: write it like -o train.batch_size=16")
    try:
        value = yaml.load(text, Loader=_UniqueKeyLoader) if text.strip() else None
    except (yaml.YAMLError, RecursionError, ValueError):
        raise UserError(f"override '{_clip(item, 60)}': the value is not valid YAML; quote it if it is a string") from None
    return key.strip(), value


def set_dotted(raw: dict, key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(".".join(parts[: i + 1]), "is a value, not a section; override a key below it",
                              "from -o")
        node = child
    node[parts[-1]] = value


def _key_lines(node, prefix: str = "") -> dict[str, int]:
    """Map each dotted key of a composed YAML mapping to its 1-based line number."""
    found = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            found[key] = key_node.start_mark.line + 1
            found.update(_key_lines(value_node, key + "."))
    return found


# keys of earlier versions, refused in one line that names the new one (never a silent alias)
RENAMED_KEYS = {"data.long_text": "data.truncation"}  # the word the metadata, predict and the HTTP service use


def _build(cls, raw: Any, prefix: str, where: Callable[[str], str], problems: list[ConfigError]):
    """`cls` from the mapping `raw`; every problem is appended to `problems` (and the field keeps its
    default) so that one load reports all of them."""
    section = prefix.rstrip(".") or "the top level"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(ConfigError(section, f"expected a mapping of keys, got {_short(raw)}", where(section)))
        return cls()
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for name, value in raw.items():  # in file order, so problems are listed as the file reads
        key = f"{prefix}{name}"
        if key in RENAMED_KEYS:
            problems.append(ConfigError(key, f"is now {RENAMED_KEYS[key]} (the same values): rename the key",
                                        where(key)))
        elif name not in known:
            problems.append(ConfigError(key, f"unknown key{_did_you_mean(name)}; known keys here: "
                                        f"{', '.join(known)}", where(key)))
        else:
            try:
                values[name] = _checked(known[name], hints[name], value, key, where, problems)
            except ConfigError as exc:
                problems.append(exc)
    return cls(**values)


def _checked(f: dataclasses.Field, hint, value, key: str, where, problems: list[ConfigError]):
    """`value` converted to the field's type and range-checked; a ConfigError when it is not right."""
    converted = _coerce(hint, value, key, where, problems)
    test = f.metadata.get("check")
    if test is not None and converted is not None and not test(converted):
        raise ConfigError(key, f"expected {f.metadata['expected']}, got {_short(value)}", where(key))
    return converted


def _did_you_mean(name: str) -> str:
    """The dotted keys anywhere in the config whose last part is spelled like `name` (a typo, or a key
    typed in the wrong section)."""
    keys = _dotted_keys(Config)
    leaves = {key.rsplit(".", 1)[-1] for key in keys}
    close = difflib.get_close_matches(name, leaves, n=1, cutoff=0.75)
    matches = [key for leaf in close for key in keys if key.rsplit(".", 1)[-1] == leaf]
    return f" (did you mean {' or '.join(matches[:3])}?)" if matches else ""


def _dotted_keys(cls, prefix: str = "") -> list[str]:
    keys = []
    for name, hint in typing.get_type_hints(cls).items():
        options = typing.get_args(hint) if _is_union(hint) else (hint,)
        section = next((option for option in options if dataclasses.is_dataclass(option)), None)
        keys += _dotted_keys(section, f"{prefix}{name}.") if section else [prefix + name]
    return keys


def _coerce(hint, value, key: str, where, problems: list[ConfigError]):
    """Check `value` against the type hint; returns it converted (list -> tuple, int -> float)."""
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(key, "must be set (null is not allowed here)", where(key))
    expected = []
    for option in options:
        if option is type(None):
            continue
        if dataclasses.is_dataclass(option):
            if isinstance(value, dict):
                return _build(option, value, key + ".", where, problems)
            expected.append("a mapping")
        elif typing.get_origin(option) is tuple and typing.get_args(option)[0] is float:
            numbers = [_float_or_none(v) for v in value] if isinstance(value, list) else [None]
            if all(number is not None and math.isfinite(number) for number in numbers):
                return tuple(numbers)
            expected.append("a list of numbers")
        elif typing.get_origin(option) is tuple:
            if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                               for v in value):
                return tuple(str(v) for v in value)
            expected.append("a list of names")
        elif option is bool:
            if isinstance(value, bool):
                return value
            expected.append("true or false")
        elif option is int:
            if isinstance(value, int) and not isinstance(value, bool):
                if abs(value) >= 2**63:
                    raise ConfigError(key, f"expected an integer below 2**63, got {_short(value)}", where(key))
                return value
            expected.append("an integer")
        elif option is float:
            number = _float_or_none(value)
            if number is not None and math.isfinite(number):
                return number
            expected.append("a finite number")
        elif option is str:
            if isinstance(value, str):
                return value
            expected.append("a string")
    raise ConfigError(key, f"expected {' or '.join(expected)}, got {_short(value)}", where(key))


def _short(value) -> str:
    """repr() of a value as an error message shows it: a 40-digit number or a long text is not echoed whole."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"{str(value)[:40]}..."  # repr would spell out every digit
    return _clip(repr(value), 40)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _float_or_none(value):
    """A number as float (None if it is not one). YAML 1.1 reads `3e-5` (no dot) as a string: accept it
    as the number the user meant."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):  # an int beyond float's range
        return None


def _is_union(hint) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _cross_field_problems(config: Config, where) -> list[ConfigError]:
    """Settings that are each valid but contradict one another."""
    model, train, problems = config.model, config.train, []
    if config.pretrain.corpus == ():  # before the rules that read "no corpus" as "not pretraining"
        return [ConfigError("pretrain.corpus", "is an empty list: list the files of unlabeled text to pretrain on",
                            where("pretrain.corpus"))]
    if model.backbone is None and (model.scratch is None or not model.scratch.vocab_file):
        problems.append(ConfigError("model.backbone", "set a PaddleNLP name or model directory, or set "
                                    "model.scratch.vocab_file to train a randomly initialised encoder",
                                    where("model.backbone")))
    if model.backbone is not None and model.scratch is not None:
        problems.append(ConfigError("model.scratch", f"model.backbone ({model.backbone}) is set too: a pretrained "
                                    "backbone replaces the scratch encoder, so set one of them (-o model.scratch=null "
                                    "to keep the backbone)", where("model.scratch")))
    scratch = model.scratch if model.backbone is None else None
    if scratch is not None and scratch.hidden_size % scratch.num_heads:
        problems.append(ConfigError("model.scratch.num_heads", f"must divide hidden_size ({scratch.hidden_size})",
                                    where("model.scratch.num_heads")))
    if scratch is not None and config.data.max_length > scratch.max_position_embeddings:
        problems.append(ConfigError("data.max_length", "is longer than model.scratch.max_position_embeddings "
                                    f"({scratch.max_position_embeddings})", where("data.max_length")))
    data = config.data
    if data.truncation != "head" and data.text_pair_column is not None:
        problems.append(ConfigError("data.truncation", f"is {data.truncation}, but text pairs are cut longest-first: "
                                    "leave it at head for a text-pair task", where("data.truncation")))
    if data.truncation == "head_tail" and data.head_tokens > data.max_length - 3:
        problems.append(ConfigError("data.head_tokens", f"leaves no room for the tail: keep it below max_length "
                                    f"- 2 ({data.max_length - 2})", where("data.head_tokens")))
    if data.truncation == "sliding_window" and data.stride > data.max_length - 2:
        problems.append(ConfigError("data.stride", f"would skip tokens between windows: keep it at most max_length "
                                    f"- 2 ({data.max_length - 2})", where("data.stride")))
    problems += _task_problems(config, where) + _prototype_problems(config, where)
    if train.runtime.packed_batches:
        other = (("train.runtime.recompute", "true, which recomputes a layer outside the packed forward: set one of "
                  "them false", train.runtime.recompute),
                 ("task", f"{config.task}: packed batches train single-label classifiers; set "
                  "train.runtime.packed_batches=false", config.task != "single_label"),
                 ("train.recipe", f"{train.recipe}, whose pairs are not packed; set train.runtime.packed_batches=false",
                  train.recipe != "fine_tune"))
        problems += [ConfigError(key, f"is {what}", where(key)) for key, what, clash in other if clash]
    weights, labels = train.class_weights, config.data.labels
    if isinstance(weights, tuple) and labels and len(weights) != len(labels):
        problems.append(ConfigError("train.class_weights", f"has {len(weights)} weights for {len(labels)} labels "
                                    f"({', '.join(labels)}): give one per label, in that order",
                                    where("train.class_weights")))
    for key, value in (("train.evaluation.every", train.evaluation.every),
                       ("train.evaluation.early_stopping_patience", train.evaluation.early_stopping_patience)):
        if value and config.data.dev is None and not config.pretrain.corpus:  # pretraining holds its own out
            problems.append(ConfigError(key, f"is {value} but data.dev is not set, so nothing would be evaluated; "
                                        f"set data.dev or {key}=0", where(key)))
    return problems


def _prototype_problems(config: Config, where) -> list[ConfigError]:
    """What a prototype head needs: a text vector made for similarity, one label per text."""
    model, problems = config.model, []
    needs = [(key, value) for key, value, off in (("data.label_descriptions", config.data.label_descriptions, None),
                                                  ("train.recipe", config.train.recipe, "fine_tune")) if value != off]
    if model.head != "prototype":
        problems += [ConfigError(key, f"is {value}, which builds class prototypes: set model.head: prototype",
                                 where(key)) for key, value in needs]
        return problems
    if model.pooling == "pooler":
        problems.append(ConfigError("model.pooling", "is pooler, whose output was trained to tell sentence order, not "
                                    "similarity: a prototype head needs mean (sentence-embedding models such as e5) "
                                    "or cls", where("model.pooling")))
    if config.task != "single_label":
        problems.append(ConfigError("model.head", "is prototype, which gives one label per text: set task: "
                                    "single_label, or model.head: linear", where("model.head")))
    if config.data.train is None and config.data.label_descriptions is None and not config.pretrain.corpus:
        problems.append(ConfigError("data.label_descriptions", "is not set and neither is data.train: a prototype "
                                    "head starts from one of them", where("data.label_descriptions")))
    if config.train.recipe == "few_shot" and config.train.batch_size < 2:  # a batch of one row holds no pair: the
        # run trained nothing (loss 0.0) and exited 0
        problems.append(ConfigError("train.batch_size", f"is {config.train.batch_size}, but the few_shot recipe "
                                    "learns from the pairs of rows within a batch: set 2 or more (init writes 16)",
                                    where("train.batch_size")))
    return problems


def _task_problems(config: Config, where) -> list[ConfigError]:
    """The metric, loss and class weights that make sense for `task`."""
    train, problems = config.train, []
    metric, multi = train.evaluation.metric, TASK_METRICS["multi_label"]
    if config.task == "multi_label" and metric not in multi:
        problems.append(ConfigError("train.evaluation.metric", f"is {metric}, but a multi_label model is picked by "
                                    f"{', '.join(multi)}: set train.evaluation.metric: micro_f1",
                                    where("train.evaluation.metric")))
    if config.task == "single_label" and metric in set(multi) - set(TASK_METRICS["single_label"]):
        problems.append(ConfigError("train.evaluation.metric", f"{metric} scores a multi_label model; set task: "
                                    "multi_label, or pick by accuracy or macro_f1", where("train.evaluation.metric")))
    decision = train.decision
    if decision.target_coverage is not None and decision.abstain_below is not None:
        problems.append(ConfigError("train.decision.abstain_below", "and train.decision.target_coverage are both set: "
                                    "give one (a fixed threshold, or the share of texts to answer)",
                                    where("train.decision.abstain_below")))
    if decision.target_coverage is not None and config.data.dev is None:
        problems.append(ConfigError("train.decision.target_coverage", "is fitted on dev: set data.dev",
                                    where("train.decision.target_coverage")))
    if config.task == "multi_label":
        for key, value, default in (("train.loss", train.loss, "cross_entropy"),
                                    ("train.class_weights", train.class_weights, None),
                                    ("train.calibration", train.calibration, "none"),
                                    ("train.decision.target_coverage", decision.target_coverage, None),
                                    ("train.decision.abstain_below", decision.abstain_below, None)):
            if value != default:
                problems.append(ConfigError(key, f"is {value!r}, but a multi_label model learns each label by binary "
                                            f"cross-entropy, which {key} does not change yet: remove it", where(key)))
        if config.data.label_hierarchy == config.data.label_delimiter:
            problems.append(ConfigError("data.label_hierarchy", f"is {config.data.label_delimiter!r}, which also "
                                        "separates a row's labels (data.label_delimiter): give the levels another "
                                        "separator, as \"/\"", where("data.label_hierarchy")))
    if train.level_loss and (config.data.label_hierarchy is None or config.task != "single_label"):
        problems.append(ConfigError("train.level_loss", "weighs the upper levels of a single_label label tree: set "
                                    "data.label_hierarchy (and task single_label), or remove it",
                                    where("train.level_loss")))
    if config.model.head == "prototype" and config.data.label_hierarchy is not None:
        problems.append(ConfigError("data.label_hierarchy", "with model.head prototype is not supported yet: use the "
                                    "linear head, or flat labels", where("data.label_hierarchy")))
    return problems
