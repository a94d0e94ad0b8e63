"""ELECTRA's pretraining objective (replaced-token detection), on the same masks as masked-LM pretraining.

The generator is trained as a masked LM; its samples (Gumbel-max) replace the masked tokens, and the
discriminator learns, for every real token, whether it was replaced. The Gumbel noise is drawn on the training
device, each example's from a generator seeded by (seed, step, example): a resumed run draws the same, examples in
different micro-batches or on different ranks draw different ones, and how the examples are split across
processes changes nothing. Loss: generator loss + `weight` x discriminator loss, each example counting once in both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle
import paddle.nn.functional as F

from paddle_ft.data.features import Features, eval_batches
from paddle_ft.engine.batch_copies import to_device
from paddle_ft.engine.evaluate import NonFiniteScores
from paddle_ft.engine.objectives import Objective
from paddle_ft.engine.objectives.masked_lm import EVALUATION_STEP, MaskedLanguageModelling


@dataclass(frozen=True)
class ReplacedTokenDetecting(Objective):
    masking: MaskedLanguageModelling
    weight: float = 50.0
    """The discriminator's share of the loss (ELECTRA's lambda)."""
    metrics: tuple[str, ...] = ("replaced_f1",)

    def _forward(self, model, features: Features, indices, step: int, autocast):
        """(generator token losses [n], weights [n], discriminator logits [b, s], replaced [b, s] (a tensor: read on
        the device, so a training step does not wait for it), real [b, s], generator predictions [n], targets [n])."""
        ids, types, flat, targets, weights = self.masking.batch(features, indices, step)
        masked_per_example = np.bincount(flat // ids.shape[1], minlength=len(indices))
        noise = gumbel_noise(self.masking.seed, step, indices, masked_per_example, self.masking.vocabulary.size)
        with autocast():
            generator_logits, shown, logits = model(to_device(ids), to_device(types),
                                                    to_device(flat), noise)
        generator_logits = generator_logits.astype("float32")  # [n, vocab]
        token_losses = F.cross_entropy(generator_logits, to_device(targets), reduction="none").reshape([-1])
        original = ids.copy()
        original.flat[flat] = targets
        # a sample equal to the original is not replaced
        replaced = (shown != to_device(original, dtype=shown.dtype)).astype("float32")
        real = (original != self.masking.pad_token_id).astype(np.float32)
        return (token_losses, weights, logits.astype("float32"), replaced, real, generator_logits.argmax(axis=-1),
                targets)

    def loss(self, model, features: Features, indices: list[int], step: int, autocast) -> paddle.Tensor:
        token_losses, weights, logits, replaced, real, _, _ = self._forward(model, features, indices, step, autocast)
        generator = (token_losses * to_device(weights)).sum()
        real_t = to_device(real)
        per_token = F.binary_cross_entropy_with_logits(logits, replaced, reduction="none") * real_t
        return generator + self.weight * (per_token.sum(axis=1) / real_t.sum(axis=1)).sum()

    @paddle.no_grad()
    def score(self, model, features: Features, subset: np.ndarray, batch_size: int, autocast):
        """This process's part: counts of the discriminator's calls and the generator's hits."""
        model.eval()
        subset = np.asarray(subset)
        counts = np.zeros(5)  # true positives, predicted positives, replaced, generator correct, masked
        for positions in eval_batches(features.lengths[subset], batch_size):
            _, _, logits, replaced, real, guesses, targets = self._forward(model, features, subset[positions],
                                                                           EVALUATION_STEP, autocast)
            said, replaced = (logits.numpy() > 0) & (real > 0), replaced.numpy()
            counts += [(said & (replaced > 0)).sum(), said.sum(), replaced.sum(),
                       int((guesses.numpy() == targets).sum()), len(targets)]
        return counts

    def report(self, features: Features, parts: list) -> dict:
        hits, said, replaced, correct, masked = np.sum(parts, axis=0)
        if not np.isfinite([hits, said, replaced]).all():
            raise NonFiniteScores("the ELECTRA scores are not finite: training diverged; lower the learning rate")
        precision, recall = hits / max(said, 1), hits / max(replaced, 1)
        f1 = 2 * precision * recall / max(precision + recall, 1e-12)
        return {"replaced_f1": f1, "replaced_precision": precision, "replaced_recall": recall,
                "masked_accuracy": correct / max(masked, 1), "examples": len(features)}


# Mixed into the seed so that the noise's stream is not the masks' (masked_lm seeds those with (seed, step, example)).
_NOISE_STREAM = 0x6E6F697365


def gumbel_noise(seed: int, step: int, indices, counts, vocabulary_size: int) -> paddle.Tensor:
    """[sum(counts), vocabulary_size] float32 Gumbel noise on the current device: counts[k] rows for example
    indices[k], drawn from Paddle's generator seeded by (seed, step, that example). Paddle's global generators also
    drive dropout, so their state is put back afterwards: the noise leaves the rest of training's randomness as
    it was. (Drawn on the host, this was ~46 MB per micro-batch copied to the GPU, the same rows for every
    micro-batch and rank.)"""
    devices = ["cpu", "gpu"] if paddle.is_compiled_with_cuda() else ["cpu"]
    saved = {device: paddle.get_rng_state(device) for device in devices}
    rows = []
    try:
        for example, count in zip(indices, counts):
            if count:
                paddle.seed(int(np.random.SeedSequence([seed, step, int(example), _NOISE_STREAM]).generate_state(1)[0]))
                rows.append(paddle.rand([int(count), vocabulary_size], dtype="float32"))
    finally:
        for device, state in saved.items():
            paddle.set_rng_state(state, device)
    if not rows:
        return paddle.zeros([0, vocabulary_size], dtype="float32")
    return -paddle.log(-paddle.log(paddle.concat(rows).clip(min=1e-9)))
