"""Do a trained model's explanations point at what it uses? The deletion test on a labelled file: for each text, the
predicted label's probability once the k tokens with the largest attribution are removed, against once k random
tokens are; prints the share of texts where removing the top tokens costs more, and the completeness errors.

    python tools/explain_check.py --model out/demo/best --data data/demo/test.tsv --texts 200 --k 3
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_ft.analysis.explain import Explainer  # noqa: E402
from paddle_ft.data.readers import Columns, format_of, read_examples  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a trained model folder (OUT/best)")
    parser.add_argument("--data", required=True, help="labelled file whose texts are explained")
    parser.add_argument("--texts", type=int, default=200, help="how many (the first ones with k+1 tokens or more)")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    explainer = Explainer.load(args.model, steps=args.steps)
    meta = explainer.meta
    examples, _ = read_examples(args.data, format_of(args.data, meta.format), Columns.of(meta, meta.multi_label))
    rng = random.Random(args.seed)
    wins, drops, errors, started = [], [], [], time.perf_counter()
    for example in examples:
        if len(wins) == args.texts:
            break
        (explanation,) = explainer.explain(example.text, example.text_pair)
        words = [i for i, (token, segment) in enumerate(zip(explanation.tokens, explanation.segments))
                 if segment == 0 and token not in ("[CLS]", "[SEP]")]
        if len(words) <= args.k:
            continue
        ranked = sorted(words, key=lambda i: -explanation.attributions[i])[:args.k]
        chosen = rng.sample(words, args.k)
        after = [explainer.probability_without(explanation, drop) for drop in (ranked, chosen)]
        wins.append(after[0] < after[1])
        drops.append((explanation.probability - after[0], explanation.probability - after[1]))
        errors.append(explanation.completeness_error / max(abs(explanation.probability
                                                               - explanation.baseline_probability), 1e-9))
    drops = np.array(drops)
    print(json.dumps({"texts": len(wins), "k": args.k, "steps": args.steps,
                      "share_top_k_costs_more": float(np.mean(wins)),
                      "mean_probability_drop": {"top_k": float(drops[:, 0].mean()),
                                                "random_k": float(drops[:, 1].mean())},
                      "completeness_error_relative": {"median": float(np.median(errors)),
                                                      "p90": float(np.percentile(errors, 90))},
                      "seconds_per_text": (time.perf_counter() - started) / max(len(wins), 1)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
