"""The serving peer of the load test: an export's model.onnx served as a user would write it without paddle_ft,
FastAPI with one ONNX Runtime session and the `tokenizers` library, each request tokenised and run on its own (no
batching across requests), with the same request and answer shape as `paddle_ft serve` (/v1/classify, /readyz).

    python tools/bench/plain_onnx_server.py --export DIR --port N [--threads N]

It binds 127.0.0.1 only; tools/bench/serving.py starts and stops it.
"""
import argparse
import json
from pathlib import Path

import numpy as np
import onnxruntime
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from tokenizers import BertWordPieceTokenizer, Tokenizer


class Request(BaseModel):
    texts: list[str]


def app_for(export: Path, threads: int | None) -> FastAPI:
    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(str(export / "model.onnx"), options, providers=["CPUExecutionProvider"])
    label_ids = json.loads((export / "label_map.json").read_text(encoding="utf-8"))  # {label: id}
    labels = sorted(label_ids, key=label_ids.get)
    max_length = json.loads((export / "export.json").read_text(encoding="utf-8"))["model"]["max_length"]
    if (export / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(export / "tokenizer.json"))
    else:
        tokenizer = BertWordPieceTokenizer(str(export / "vocab.txt"), lowercase=True)
    tokenizer.enable_truncation(max_length)
    tokenizer.enable_padding()
    inputs = [node.name for node in session.get_inputs()]
    app = FastAPI()

    @app.get("/readyz")
    def ready() -> dict:
        return {"status": "ready"}

    @app.post("/v1/classify")
    def classify(request: Request) -> dict:
        encoded = tokenizer.encode_batch(request.texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        types = np.array([e.type_ids for e in encoded], dtype=np.int64)
        logits = session.run(None, dict(zip(inputs, (ids, types))))[0]
        probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        best = probabilities.argmax(axis=1)
        return {"predictions": [{"label": labels[int(i)], "score": float(p[i])}
                                for i, p in zip(best, probabilities)]}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    uvicorn.run(app_for(Path(args.export), args.threads), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
