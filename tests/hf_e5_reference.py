"""The reference side of the multilingual-e5 checks; runs in the peer environment (torch + transformers,
`make bench-peers`), never beside Paddle.

    python hf_e5_reference.py FOLDER INPUT.json OUTPUT.npz

Reads FOLDER (a Hugging Face BERT folder with a tokenizer.json) with `transformers.AutoTokenizer` and `BertModel`,
and writes the ids its tokenizer gives INPUT.json's texts (and pairs) and the last hidden state of its rows of
`input_ids` (padded with the tokenizer's pad id, attention mask from it).
"""
import json
import sys

import numpy as np
import torch
import transformers

folder, request, output = sys.argv[1:4]
inputs = json.loads(open(request, encoding="utf-8").read())
tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
ids = [tokenizer(text)["input_ids"] for text in inputs["texts"]]
pair_ids = [tokenizer(a, b)["input_ids"] for a, b in inputs.get("pairs", [])]
model = transformers.BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
rows = torch.tensor(inputs["input_ids"])
with torch.no_grad():
    hidden = model(input_ids=rows, attention_mask=(rows != tokenizer.pad_token_id).long()).last_hidden_state
np.savez(output, hidden=hidden.numpy(), ids=np.array(json.dumps(ids)), pair_ids=np.array(json.dumps(pair_ids)),
         tokenizer_class=np.array(type(tokenizer).__name__))
