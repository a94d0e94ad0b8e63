"""Peak memory of one training step with and without `train.runtime.recompute`, each in its own process.

    python tools/recompute_memory.py [--layers 6] [--hidden 512] [--batch 32] [--length 256]

Prints the resident-set growth of one forward + backward over the memory the built model already holds, for
both settings, and their ratio. CPU only; on a GPU the saving is the same activations in device memory.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys


def one_step(layers: int, hidden: int, batch: int, length: int, recompute: bool) -> dict:
    from paddle_ft import runtime

    runtime.configure()
    import numpy as np
    import paddle

    from paddle_ft.engine.recompute import use_recompute
    from paddle_ft.models.networks import BERTForTextClassification, scratch_encoder

    paddle.seed(0)
    model = BERTForTextClassification(scratch_encoder("bert", 8000, hidden, layers, hidden // 64, hidden * 4, length,
                                                      0.1, 0), 2, 0.1)
    if recompute:
        use_recompute(model)
    model.train()
    ids = paddle.to_tensor(np.random.default_rng(0).integers(1, 8000, (batch, length)))
    labels = paddle.to_tensor(np.arange(batch) % 2)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    paddle.nn.functional.cross_entropy(model(ids), labels).backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"recompute": recompute, "step_peak_mib": (peak - before) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = (args.layers, args.hidden, args.batch, args.length)
    if args.child:
        print(json.dumps(one_step(*shape, recompute=args.child == "on")))
        return
    results = {}
    for setting in ("off", "on"):
        done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", setting], capture_output=True,
                              text=True, check=True)
        results[setting] = json.loads(done.stdout.strip().splitlines()[-1])["step_peak_mib"]
    print(f"{args.layers} layers x {args.hidden} hidden, batch {args.batch} x {args.length} tokens: one step adds "
          f"{results['off']:.0f} MiB without recompute, {results['on']:.0f} MiB with it "
          f"({results['on'] / results['off']:.2f}x)")


if __name__ == "__main__":
    main()
