"""The Hugging Face side of `tools/e5_bench.py`, run with the peer environment's python (torch + transformers;
`make bench-peers`); never imported by paddle_ft:

    .venv-peers/bin/python tools/e5_bench_peer.py SETTINGS.json

Fine-tunes the same backbone folder (config.json + model.safetensors, as `trim-vocab` or `make e5-small` write it)
with the `Trainer` and the recipe paddle_ft runs: the encoder mean-pooled over real tokens, dropout and a linear head
(normal(0, 0.02) weights, zero bias), AdamW (no decay on biases and LayerNorm weights), linear warmup then decay,
global-norm clipping, length-grouped batches (`train_sampling_strategy="group_by_length"`), seeded. Token ids come
from the parent (features files), so both engines train on exactly the same ids.

SETTINGS: backbone, train/dev/test (features JSONL: input_ids, token_type_ids, label), num_labels, epochs or
max_steps, learning_rate, warmup (a proportion of the steps), weight_decay, max_grad_norm, batch_size, dropout,
seed, threads, bf16 (the Trainer's `bf16=True`: torch's CPU autocast to bfloat16). With dev and test: the best epoch by dev accuracy is kept and scored on test. Prints one line
`E5_BENCH_RESULT {json}`: training samples/s (evaluation and saving left out), per-step times, accuracies.
"""
import json
import math
import sys
import tempfile
import time

RESULT_MARK = "E5_BENCH_RESULT "


def read_features(path):
    with open(path, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    return [{"input_ids": r["input_ids"], "token_type_ids": r["token_type_ids"],
             "attention_mask": [1] * len(r["input_ids"]), "labels": r["label"]} for r in rows]


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as file:
        settings = json.load(file)

    import numpy as np
    import torch
    import transformers
    from torch import nn
    from transformers import (BertModel, DataCollatorWithPadding, PreTrainedTokenizerFast, Trainer,
                              TrainerCallback, TrainingArguments)
    from transformers.modeling_outputs import SequenceClassifierOutput

    torch.set_num_threads(settings["threads"])
    transformers.set_seed(settings["seed"])

    class MeanPooledClassifier(nn.Module):
        """paddle_ft's `pooling: mean` head: the mean of the last hidden states over real tokens."""

        def __init__(self):
            super().__init__()
            self.encoder = BertModel.from_pretrained(settings["backbone"], add_pooling_layer=False)
            self.dropout = nn.Dropout(settings["dropout"])
            self.classifier = nn.Linear(self.encoder.config.hidden_size, settings["num_labels"])
            nn.init.normal_(self.classifier.weight, std=0.02)
            nn.init.zeros_(self.classifier.bias)

        def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None):
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                  token_type_ids=token_type_ids).last_hidden_state
            if self.training:  # the collator also pads evaluation batches: count training ones here
                clock.batch(len(input_ids), int(attention_mask.sum()), attention_mask.numel())
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            logits = self.classifier(self.dropout((hidden * mask).sum(1) / mask.sum(1)))
            loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
            return SequenceClassifierOutput(loss=loss, logits=logits)

    train = read_features(settings["train"])
    dev = read_features(settings["dev"]) if settings.get("dev") else None
    test = read_features(settings["test"]) if settings.get("test") else None
    tokenizer = PreTrainedTokenizerFast.from_pretrained(settings["backbone"])  # the collator pads with its pad id
    clock = StepClock(TrainerCallback)
    model = MeanPooledClassifier()

    steps_per_epoch = math.ceil(len(train) / settings["batch_size"])
    total_steps = settings.get("max_steps") or steps_per_epoch * settings["epochs"]
    evaluate = {}
    if dev is not None:  # paddle_ft evaluates at each epoch's end and keeps the best by dev accuracy
        evaluate = {"eval_strategy": "epoch", "save_strategy": "epoch", "load_best_model_at_end": True,
                    "metric_for_best_model": "accuracy", "save_total_limit": 1, "save_only_model": True}

    def accuracy(prediction):
        return {"accuracy": float((np.argmax(prediction.predictions, -1) == prediction.label_ids).mean())}

    with tempfile.TemporaryDirectory() as output_dir:
        arguments = TrainingArguments(
            output_dir=output_dir, per_device_train_batch_size=settings["batch_size"],
            per_device_eval_batch_size=64, num_train_epochs=settings.get("epochs") or 1,
            max_steps=settings.get("max_steps") or -1, learning_rate=settings["learning_rate"],
            warmup_steps=int(settings["warmup"] * total_steps), weight_decay=settings["weight_decay"],
            max_grad_norm=settings["max_grad_norm"], lr_scheduler_type="linear",
            train_sampling_strategy="group_by_length", use_cpu=True, bf16=settings.get("bf16", False),
            seed=settings["seed"], report_to=[],
            logging_strategy="no", disable_tqdm=True, **({"save_strategy": "no"} if dev is None else evaluate))
        trainer = Trainer(model=model, args=arguments, train_dataset=train, eval_dataset=dev,
                          data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy if dev is not None else None,
                          callbacks=[clock])
        started = time.perf_counter()
        trainer.train()
        result = {"wall_seconds": time.perf_counter() - started, **clock.summary(), "steps": total_steps,
                  "threads": torch.get_num_threads(), "bf16": arguments.bf16,
                  "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}
        if dev is not None:
            result["dev_accuracy"] = trainer.evaluate(dev)["eval_accuracy"]
        if test is not None:
            result["test_accuracy"] = trainer.evaluate(test)["eval_accuracy"]
    print(RESULT_MARK + json.dumps(result), flush=True)


def StepClock(base):
    """A Trainer callback (of the `base` class: TrainerCallback) that times every optimizer step from the end of
    the previous one (batch collation included, as paddle_ft's rate includes its own), leaving out the time spent
    evaluating and saving; the model's forward reports each training batch's samples and tokens."""

    class Clock(base):
        def __init__(self):
            self.last, self.seconds, self.samples, self.real, self.padded = None, [], [], [], []

        def batch(self, samples, real, padded):
            self.samples.append(samples)
            self.real.append(real)
            self.padded.append(padded)

        def on_train_begin(self, *unused, **kwargs):
            self.last = time.perf_counter()

        def on_step_end(self, *unused, **kwargs):
            now = time.perf_counter()
            self.seconds.append(now - self.last)
            self.last = now

        def on_evaluate(self, *unused, **kwargs):
            self.last = time.perf_counter()

        def on_save(self, *unused, **kwargs):
            self.last = time.perf_counter()

        def summary(self, skip=8):
            """Rates over the steps after the first `skip` (start-up), as totals over time."""
            steps = len(self.seconds)
            timed = slice(min(skip, steps - 1), steps)
            seconds = sum(self.seconds[timed])
            return {"samples_per_s": sum(self.samples[:steps][timed]) / seconds,
                    "real_tokens_per_s": sum(self.real[:steps][timed]) / seconds,
                    "padding_share": 1 - sum(self.real[:steps][timed]) / sum(self.padded[:steps][timed]),
                    "timed_steps": len(self.seconds[timed]), "timed_seconds": seconds}

    return Clock()


if __name__ == "__main__":
    main()
