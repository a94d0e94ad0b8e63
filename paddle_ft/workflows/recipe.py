"""`init`'s recipe for a pretrained encoder, from what its folder says of it: the learning rate from its size, the
pooling from whether it has a pooler, and whether its vocabulary is worth trimming.

The learning rate follows one rule through the measured points: 5e-4 for the demo's 2-layer, 128-wide encoder
(docs/demo.md: 2e-4 and 1e-3 both scored lower), about 3e-5 for a 12-layer, 768-wide one (BERT-base's published
recipes use 2e-5 to 5e-5): the rate falls with the square root of the encoder's weights outside the embeddings. It
gives ~7e-5 for multilingual-e5-small (12 layers, 384 wide); docs/demo.md has the grid that checks it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

REFERENCE_WEIGHTS, REFERENCE_RATE = 393_216, 5.0e-4  # the demo encoder: 2 x (4 x 128^2 + 2 x 128 x 512) weights
TRIM_ABOVE = 50_000  # vocabularies larger than this are offered trim-vocab


@dataclass(frozen=True)
class EncoderFacts:
    layers: int
    hidden: int
    ffn: int
    vocab: int
    has_pooler: bool
    text_prefix: str = ""
    """What the folder's README says to put before a text (e5's "query: "), or nothing."""

    @property
    def layer_weights(self) -> int:
        """Weights of the transformer layers (attention's four projections and the feed-forward pair), biases aside."""
        return self.layers * (4 * self.hidden ** 2 + 2 * self.hidden * self.ffn)


def learning_rate_for(facts: EncoderFacts) -> float:
    """REFERENCE_RATE scaled by the inverse square root of the layers' weights, to one significant digit."""
    rate = REFERENCE_RATE * math.sqrt(REFERENCE_WEIGHTS / facts.layer_weights)
    return float(f"{rate:.0e}")


def encoder_facts(folder: Path) -> EncoderFacts | None:
    """What config.json and the weights' names say of a local encoder folder (None where it lacks config.json)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        facts = EncoderFacts(int(config["num_hidden_layers"]), int(config["hidden_size"]),
                             int(config.get("intermediate_size", 4 * config["hidden_size"])), int(config["vocab_size"]),
                             _has_pooler(folder), _documented_prefix(folder))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return facts


def _documented_prefix(folder: Path) -> str:
    """"query: " where the folder's README says its texts start with it (multilingual-e5's, as make e5-small writes
    it): the instruction e5 was trained with for texts compared with each other."""
    try:
        readme = (folder / "README.md").read_text(encoding="utf-8")
    except OSError:
        return ""
    return "query: " if '"query: "' in readme else ""


def _has_pooler(folder: Path) -> bool:
    from paddle_ft.models.convert import PADDLE_WEIGHTS, SAFETENSORS, safetensors_names

    if (folder / SAFETENSORS).is_file():
        return any(".pooler." in f".{name}" for name in safetensors_names(folder / SAFETENSORS))
    if (folder / PADDLE_WEIGHTS).is_file():
        import paddle

        return any(".pooler." in f".{name}" for name in paddle.load(str(folder / PADDLE_WEIGHTS)))
    return True  # a PyTorch pickle: BERT-family checkpoints mostly keep their pooler


def recipe_notes(facts: EncoderFacts, backbone: str, data_files: list[str], rate: float) -> list[str]:
    """What init tells the user about the recipe it chose for this encoder; `data_files` all the labelled files
    (the trim advice names them all: trimmed on a 16-row training file, 13.6% of a dev set's tokens became <unk>)."""
    notes = [f"learning rate {rate:g}: {backbone} has {facts.layers} layers of width {facts.hidden} "
             f"({facts.layer_weights / 1e6:.1f}M weights outside the embeddings); smaller encoders learn at higher "
             "rates (5e-4 for a 2-layer 128-wide one, ~3e-5 for BERT-base)"]
    if not facts.has_pooler:
        notes.append(f"pooling mean: {backbone} has no pooler weights (a sentence-embedding model, as E5 and bge are, "
                     "mean-pools)")
    if facts.vocab > TRIM_ABOVE:
        notes.append(f"its embedding table has {facts.vocab:,} rows (one per vocabulary piece, and any spare ones), "
                     "most of which your texts never use: python -m "
                     f"paddle_ft trim-vocab --backbone {backbone} --data {' '.join(data_files)} --output "
                     f"{Path(backbone)}-trimmed keeps the ones they do (add files of the unlabelled text the model "
                     "will read: a piece none of them holds reads as <unk>) and takes far less memory in training; then "
                     "set model.backbone to that folder")
    return notes
