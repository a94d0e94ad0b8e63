"""The pretraining objective: masked-language modelling, scored by masked-token accuracy and perplexity.

Masks are drawn from (seed, step, example): a resumed run masks exactly as the uninterrupted one would, every
epoch sees new masks (dynamic masking), and an evaluation always masks the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import paddle
import paddle.nn.functional as F

from paddle_ft.data.features import Features, eval_batches
from paddle_ft.data.masking import Vocabulary, mask_example
from paddle_ft.engine.batch_copies import copies_done, to_device
from paddle_ft.engine.evaluate import NonFiniteScores
from paddle_ft.engine.objectives import Objective
from paddle_ft.text import pad_ids

EVALUATION_STEP = 2**32  # the masking "step" of every evaluation, beyond any training step


@dataclass(frozen=True)
class MaskedLanguageModelling(Objective):
    vocabulary: Vocabulary
    pad_token_id: int
    seed: int
    rate: float = 0.15
    metrics: tuple[str, ...] = ("masked_accuracy",)

    def batch(self, features: Features, indices, step: int):
        """(input ids [b, s], segment ids [b, s], flat positions [n], targets [n], weights [n]) with each
        example's masks; a position's weight is 1 / its example's masked count, so that every example counts
        once in the loss, however many tokens it masks."""
        seen, types, positions, targets, weights = [], [], [], [], []
        for i in indices:
            ids = features.input_ids[i]
            words = features.word_ids[i] if features.word_ids is not None else None
            masked, chosen = mask_example(ids, self.vocabulary, np.random.default_rng([self.seed, step, int(i)]),
                                          self.rate, words)
            seen.append(masked)
            types.append(features.token_type_ids[i])
            positions.append(chosen)
            targets.append(ids[chosen])
            weights.append(np.full(len(chosen), 1.0 / max(len(chosen), 1), dtype=np.float32))
        input_ids, token_type_ids = pad_ids(seen, types, self.pad_token_id)
        flat = np.concatenate([row * input_ids.shape[1] + p for row, p in enumerate(positions)])
        return input_ids, token_type_ids, flat, np.concatenate(targets), np.concatenate(weights)

    def _logits(self, model, batch, autocast):
        input_ids, token_type_ids, flat = batch[:3]
        with autocast():
            logits = model(to_device(input_ids), to_device(token_type_ids), to_device(flat))
        return logits.astype("float32")  # [n, vocab]

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        """The summed loss of the examples `indices`: each one's mean over its masked tokens."""
        batch = self.batch(features, indices, step)
        token_losses = F.cross_entropy(self._logits(model, batch, autocast), to_device(batch[3]),
                                       reduction="none").reshape([-1])
        return (token_losses * to_device(batch[4])).sum()

    @paddle.no_grad()
    def score(self, model, features: Features, subset: np.ndarray, batch_size: int, autocast):
        """This process's part: (summed token loss, correct predictions, masked tokens)."""
        model.eval()
        subset = np.asarray(subset)
        loss, correct, count = 0.0, 0, 0
        for positions in eval_batches(features.lengths[subset], batch_size):
            batch = self.batch(features, subset[positions], EVALUATION_STEP)
            logits = self._logits(model, batch, autocast)
            targets = to_device(batch[3])
            loss += float(F.cross_entropy(logits, targets, reduction="sum"))
            correct += int((logits.argmax(axis=-1) == targets).sum())
            copies_done()  # those reads waited for the batch's copies
            count += len(batch[3])
        return loss, correct, count

    def report(self, features: Features, parts: list) -> dict:
        loss, correct, count = (sum(values) for values in zip(*parts))
        if not math.isfinite(loss):
            raise NonFiniteScores("the masked-LM loss is NaN/inf: the weights are not finite (training diverged); "
                                  "lower train.optimizer.learning_rate, or use an earlier checkpoint")
        return {"masked_accuracy": correct / count, "perplexity": math.exp(loss / count), "loss": loss / count,
                "masked_tokens": count, "examples": len(features)}
