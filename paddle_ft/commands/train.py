"""`train`: config -> data -> model -> engine, writing everything under `output_dir`."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import paddle

from paddle_ft.build import build_model, build_splits, build_tokenizer, model_meta, read_dataset
from paddle_ft.config import load_config, save_config
from paddle_ft.engine.checkpoint import atomic_directory
from paddle_ft.engine.trainer import log, train
from paddle_ft.errors import ConfigError, UserError
from paddle_ft.model import save_model


def run(config_path: str, overrides: list[str]) -> int:
    config = load_config(config_path, overrides)
    if config.data.train is None:
        raise ConfigError("data.train", "training needs a training file; set data.train")
    output_dir = prepare_output_dir(Path(config.output_dir))
    seed_everything(config.seed)

    dataset = read_dataset(config.data)
    tokenizer = build_tokenizer(config.model)
    splits = build_splits(dataset, tokenizer, config.data.max_length)
    model = build_model(config.model, len(dataset.label_map), tokenizer)
    save_config(config, output_dir / "config.yaml")
    dataset.label_map.save(output_dir)
    meta = model_meta(config)

    def save_best(trained, directory: Path) -> None:
        with atomic_directory(directory) as tmp:
            save_model(trained, tmp, meta)
            tokenizer.save_pretrained(str(tmp))
            dataset.label_map.save(tmp)

    results = train(model, splits, config, output_dir, dataset.label_map.names, tokenizer.pad_token_id, save_best)
    for split in ("dev", "test"):
        if split in results:
            log(f"{split} accuracy {results[split]['accuracy']:.4f}  macro-F1 {results[split]['macro_f1']:.4f} "
                f"(best model, step {results['best_step']})")
    log(f"wrote {output_dir}/best and {output_dir}/results.json")
    return 0


def prepare_output_dir(output_dir: Path) -> Path:
    """Create `output_dir`, refusing one that already holds a run (so no earlier work is overwritten)."""
    if (output_dir / "metrics.jsonl").exists():
        raise UserError(f"{output_dir} already holds a training run; pick a new -o output_dir=... "
                        "or delete the folder")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError("output_dir", f"{output_dir} is not writable ({exc.strerror}); choose another "
                          "folder") from None
    return output_dir


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    paddle.seed(seed)
