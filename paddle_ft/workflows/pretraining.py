"""Pretraining: masked-language-model (or ELECTRA) pretraining of an encoder on unlabeled text, continued from
`model.backbone` or from a scratch shape; best/ is a PaddleNLP encoder folder that `model.backbone` loads."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from paddle_ft.artifacts.run import Results
from paddle_ft.config import Config, load_config
from paddle_ft.data.corpus import check_unknown_share, held_out, pretraining_features, read_corpus, unmaskable
from paddle_ft.data.features import Features, Splits
from paddle_ft.data.masking import Vocabulary
from paddle_ft.engine import trainer
from paddle_ft.engine.objectives.electra import ReplacedTokenDetecting
from paddle_ft.engine.objectives.masked_lm import MaskedLanguageModelling
from paddle_ft.errors import ConfigError
from paddle_ft.log import log
from paddle_ft.models.backbone import PRETRAINING_HEAD, load_pretraining_weights
from paddle_ft.models.networks import MaskedLanguageModel, ReplacedTokenDetection
from paddle_ft.workflows.build import build_encoder, build_tokenizer
from paddle_ft.workflows.session import opened_run, ready_to_train, run_engine, shared_backbone


def pretrain(config_path: str, overrides: list[str]) -> Results | None:
    """Pretrain as the config says; the best encoder's held-out `Results` (None on the ranks other than 0)."""
    config = load_config(config_path, overrides)
    _check(config)
    with opened_run(config, "pretrain") as (dist, folder, resume_from):
        return _pretrain(config, dist, folder, resume_from)


def _pretrain(config: Config, dist, folder, resume_from) -> Results | None:
    texts, origins = read_corpus(config.pretrain.corpus, config.pretrain.text_column)
    model_config = shared_backbone(config.model, dist)
    tokenizer = build_tokenizer(model_config)
    vocabulary = _vocabulary(tokenizer, model_config)
    splits = _splits(texts, origins, tokenizer, vocabulary, config)
    encoder, report = build_encoder(model_config, tokenizer, config.data.max_length)
    masking = MaskedLanguageModelling(vocabulary, tokenizer.pad_token_id, config.seed,
                                      config.pretrain.mask_rate)
    if config.pretrain.objective == "electra":
        model = ReplacedTokenDetection(encoder, _generator(encoder, config.pretrain.generator_layers))
        objective = ReplacedTokenDetecting(masking)
    else:
        model, objective = MaskedLanguageModel(encoder), masking
    if model_config.backbone is not None:
        _continue_from(model, Path(model_config.backbone), report)
    ready_to_train(model, config, folder, dist, resume_from, None)
    folder = folder.with_encoder(tokenizer)
    training = partial(trainer.train, model, splits, config, folder, dist, resume_from, objective)
    results = run_engine(training, folder, dist, "pretrain")
    if dist.is_main:
        dev = results.dev
        scores = ", ".join(f"{name} {dev[name]:.4f}" for name in ("masked_accuracy", "perplexity", "replaced_f1")
                           if name in dev)
        log(f"held-out {scores} (best model, step {results.best_step}); fine-tune it with "
            f"-o model.backbone={folder.best_dir}")
    return results


def _continue_from(model, backbone: Path, report) -> None:
    """Continued pretraining keeps the pretraining head the backbone was saved with, where it has one."""
    continued = (backbone / PRETRAINING_HEAD).is_file()
    if continued:
        load_pretraining_weights(model, backbone)
    head = "; the pretraining head too" if continued else "; the pretraining head is new"
    log(report.describe(uses_pooler=False) + head)  # the masked-LM and ELECTRA heads read tokens, not the pooler


def _check(config: Config) -> None:
    if not config.pretrain.corpus:
        raise ConfigError("pretrain.corpus", "pretraining needs unlabeled text; list its files in pretrain.corpus")
    metric = {"mlm": "masked_accuracy", "electra": "replaced_f1"}[config.pretrain.objective]
    if config.train.evaluation.metric != metric:
        raise ConfigError("train.evaluation.metric", f"is {config.train.evaluation.metric}, but "
                          f"{config.pretrain.objective} pretraining is scored by {metric}: set "
                          f"train.evaluation.metric: {metric}")


def _splits(texts: list[str], origins, tokenizer, vocabulary: Vocabulary, config: Config) -> Splits:
    features = pretraining_features(texts, tokenizer, config.data.max_length, config.pretrain.whole_word)
    nothing = unmaskable(features, vocabulary.special_ids, origins)
    check_unknown_share(features, tokenizer.unk_token_id)
    train, heldout = held_out(len(texts), config.pretrain.heldout, config.seed)
    for name, part in (("training", train), ("held-out", heldout)):
        if len(part) and nothing[part].all():  # a loss of 0 to train on, or nothing to score (a division by 0)
            raise ConfigError("pretrain.corpus", f"its {name} texts hold no token to mask (only [UNK] or special "
                              "tokens): use a vocabulary that covers the text")
    if len(train) == 0:
        raise ConfigError("pretrain.corpus", f"holds {len(texts)} text(s), all held out for evaluation; give more "
                          "unlabeled text")
    log(f"pretraining corpus: {len(texts)} texts, {len(heldout)} held out")
    return Splits((), tokenizer.pad_token_id, _subset(features, train), _subset(features, heldout))


def _subset(features: Features, indices) -> Features:
    words = features.word_ids
    return Features([features.input_ids[i] for i in indices], [features.token_type_ids[i] for i in indices], None,
                    [words[i] for i in indices] if words is not None else None)


def _generator(encoder, layers: int):
    """ELECTRA's generator: the encoder's kind and width with `layers` layers (its embeddings get shared)."""
    config = type(encoder.config).from_dict({**encoder.config.to_dict(), "num_hidden_layers": layers})
    return type(encoder)(config)


def _vocabulary(tokenizer, model_config) -> Vocabulary:
    """What masking needs of the tokenizer. Every special token must be in the vocabulary itself: a missing [MASK]
    would silently become [UNK] (masking would teach the model to predict from [UNK])."""
    vocab = getattr(tokenizer, "slow", tokenizer).get_vocab()
    missing = [t for t in tokenizer.all_special_tokens if t not in vocab]
    if missing:
        where = model_config.scratch.vocab_file if model_config.scratch else model_config.backbone
        key = "model.scratch.vocab_file" if model_config.scratch else "model.backbone"
        raise ConfigError(key, f"the vocabulary of {where} lacks the special token(s) {', '.join(missing)}; add them "
                          "(one per line, at the top of vocab.txt)")
    special = {vocab[t] for t in tokenizer.all_special_tokens}
    return Vocabulary(len(tokenizer), vocab[tokenizer.mask_token], frozenset(special))
