"""The reference side of the Hugging Face parity test; runs in the peer environment (torch + transformers,
`make bench-peers`), never beside Paddle.

    python hf_reference.py FAMILY FOLDER INPUT.json OUTPUT.npz

Builds a tiny random FAMILY (bert | roberta | ernie) model with `transformers`, saves it into FOLDER as
`save_pretrained` writes it (config.json, model.safetensors; or, when INPUT.json says "safetensors": false,
pytorch_model.bin as transformers 4 wrote it) beside the vocab.txt already there, and writes the
last hidden state of the token ids in INPUT.json (padded rows with their attention mask) and the ids its own
tokenizer gives for INPUT.json's texts.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers

family, folder, request, output = sys.argv[1:5]
inputs = json.loads(open(request, encoding="utf-8").read())
torch.manual_seed(0)
vocab_size = sum(1 for _ in open(f"{folder}/vocab.txt", encoding="utf-8"))
shape = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64, type_vocab_size=2, pad_token_id=0)
# with their pretraining heads, as real checkpoints are saved; the RoBERTa one without a pooler, as
# RobertaForMaskedLM saves it
config_class, model_class, extra = {
    "bert": (transformers.BertConfig, transformers.BertForPreTraining, {}),
    "roberta": (transformers.RobertaConfig, transformers.RobertaForMaskedLM, {}),
    "ernie": (transformers.ErnieConfig, transformers.ErnieForMaskedLM, {"use_task_id": True})}[family]
model = model_class(config_class(**shape, **extra))
model.save_pretrained(folder)
if not inputs.get("safetensors", True):  # transformers 5 writes safetensors only; older ones wrote this pickle
    torch.save(model.state_dict(), f"{folder}/pytorch_model.bin")
    os.remove(f"{folder}/model.safetensors")
model.eval()
encoder = model.base_model
ids = torch.tensor(inputs["input_ids"])
with torch.no_grad():
    hidden = encoder(input_ids=ids, attention_mask=(ids != 0).long(),
                     token_type_ids=torch.tensor(inputs["token_type_ids"])).last_hidden_state
tokenizer = transformers.BertTokenizer(f"{folder}/vocab.txt")
hf_ids = [tokenizer(text)["input_ids"] for text in inputs["texts"]]
np.savez(output, hidden=hidden.numpy(), hf_ids=np.array(json.dumps(hf_ids)))
