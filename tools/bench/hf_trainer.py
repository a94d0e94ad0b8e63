"""The Hugging Face `Trainer` peer, run with the peer virtual environment's python (torch + transformers;
`make bench-peers`), never imported by paddle_ft:

    .venv-peers/bin/python tools/bench/hf_trainer.py MEASURED.jsonl WARMUP.jsonl VOCAB.txt THREADS [--group-by-length]
                                                     [--bf16]

Trains the benchmark's model shape with the Trainer's defaults (dynamic padding by
DataCollatorWithPadding, no length grouping unless asked) on token ids the parent wrote, so every
engine sees the same ids: a few steps on the warm-up texts, then one timed epoch over the measured ones, as the
paddle_ft job does. --bf16: the Trainer's `bf16=True`, torch's CPU autocast to bfloat16 (its bf16 row beside
paddle_ft's). Prints one result line (see shape.py).
"""
import argparse
import json
import tempfile

import shape  # the sibling module: this file runs as a script from its own folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("features")
    parser.add_argument("warmup_features")
    parser.add_argument("vocab")
    parser.add_argument("threads", type=int)
    parser.add_argument("--group-by-length", action="store_true")
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import (BertConfig, BertForSequenceClassification, BertTokenizerFast,
                              DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments)

    torch.set_num_threads(args.threads)
    tokenizer = BertTokenizerFast(args.vocab)  # only pads, as the default collator does (positional: 4.x and 5.x)
    size = shape.model_shape()
    with open(args.vocab, encoding="utf-8") as vocab:
        vocab_size = sum(1 for _ in vocab)  # ids are line numbers, as in the Paddle tokenizer
    config = BertConfig(vocab_size=vocab_size, hidden_size=size["hidden_size"],
                        num_hidden_layers=size["num_layers"], num_attention_heads=size["num_heads"],
                        intermediate_size=size["intermediate_size"], max_position_embeddings=size["max_length"],
                        num_labels=2)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)

    pad = DataCollatorWithPadding(tokenizer)
    sampling = {}
    if args.group_by_length:  # transformers 5 renamed the option
        sampling = {"train_sampling_strategy": "group_by_length"} \
            if "train_sampling_strategy" in TrainingArguments.__dataclass_fields__ else {"group_by_length": True}
        _sort_megabatches_as_on_the_whole_split()

    def train(features: str, max_steps: int, recorder: shape.StepRecorder) -> None:
        """max_steps steps over the texts of `features`, or one epoch (-1), each batch counted by `recorder`."""
        def counting_collator(batch_features):
            batch = pad(batch_features)
            recorder.batch(len(batch_features), int(batch["attention_mask"].sum()),
                           int(batch["attention_mask"].numel()))
            return batch

        with tempfile.TemporaryDirectory() as output_dir:
            training_args = TrainingArguments(
                output_dir=output_dir, per_device_train_batch_size=shape.BATCH_SIZE, max_steps=max_steps,
                num_train_epochs=1, learning_rate=shape.LEARNING_RATE, use_cpu=True, bf16=args.bf16, **sampling,
                report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0)
            Trainer(model=model, args=training_args, train_dataset=_dataset(features), data_collator=counting_collator,
                    callbacks=[recorder.callback(TrainerCallback)]).train()

    train(args.warmup_features, shape.WINDOW_STEPS, shape.StepRecorder())
    recorder = shape.StepRecorder()
    train(args.features, -1, recorder)
    shape.emit({**recorder.summary(warmup_windows=0), "threads": torch.get_num_threads(), "bf16": args.bf16,
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__}})


def _sort_megabatches_as_on_the_whole_split() -> None:
    """HF's length grouping sorts megabatches of 50 batches on a split of 6,400 texts or more (the demo's 13,889),
    but of len // (4 x batch) batches on a smaller one: on the bench's 1,536 timed texts 12, which padded 7.5% of
    the tokens against 2.0%. The bench's HF runs get the megabatch of the whole split, as paddle_ft's grouping
    (chunks of 64 batches) does."""
    import functools

    from transformers import trainer_pt_utils

    trainer_pt_utils.get_length_grouped_indices = functools.partial(trainer_pt_utils.get_length_grouped_indices,
                                                                     mega_batch_mult=50)


def _dataset(features: str) -> list[dict]:
    with open(features, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    return [{"input_ids": r["input_ids"], "token_type_ids": r["token_type_ids"],
             "attention_mask": [1] * len(r["input_ids"]), "labels": r["label"]} for r in rows]


if __name__ == "__main__":
    main()
