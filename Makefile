# xserve — build, run and test. Every target installs what it needs itself
# (pinned versions); nothing has to be installed by hand first except Go,
# Python 3 with pip, and gcc (cgo), which the development image provides.

SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
VENV := .venv
ONNX_TESTDATA := /usr/include/onnx/backend/test/data
EXAMPLE := examples/models/tinycnn
FUZZTIME ?= 20s

.PHONY: all build run test pjrt testdata venv examples conformance conformance-check fuzz bench bench-models vet clean help

all: build

help:
	@echo "make run          build xserve, install the XLA CPU PJRT plugin, run the example model"
	@echo "make test         install plugin + ONNX test data, vet, unit/integration tests, fuzz, conformance check"
	@echo "make conformance  run all ONNX backend cases, rewrite docs/onnx-conformance.md"
	@echo "make bench        trace-once benchmarks (XLA vs re-lowering vs ONNX Runtime), see docs/BENCHMARKS.md"

build:
	$(GO) build -o bin/xserve ./cmd/xserve

# The XLA CPU PJRT plugin from PyPI (xla-cpu-pjrt==0.0.1, sha256 pinned).
pjrt:
	@scripts/pjrt-install.sh

# The ONNX backend conformance data from Debian's libonnx-testdata.
testdata:
	@if [ -d $(ONNX_TESTDATA)/node ]; then echo "testdata: libonnx-testdata already installed"; else \
	  echo "testdata: installing Debian's libonnx-testdata"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libonnx-testdata; fi

# Reference frameworks (onnx, onnxruntime, numpy) for fixtures and benchmarks.
venv: $(VENV)/.installed
$(VENV)/.installed: python/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r python/requirements.txt
	touch $@

run: pjrt build
	bin/xserve version
	bin/xserve run $(EXAMPLE)/1/model.onnx --input image=$(EXAMPLE)/sample/image.npy --output .cache/run-output
	bin/xserve inspect $(EXAMPLE)/1/model.onnx

vet:
	$(GO) vet ./...

test: pjrt testdata venv vet conformance-check
	$(GO) test -count=1 -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./importer/onnx
	$(GO) test -count=1 -run '^$$' -fuzz '^FuzzDecodeTensor$$' -fuzztime $(FUZZTIME) ./importer/onnx
	$(GO) test -count=1 -timeout 30m ./...

conformance: pjrt testdata
	$(GO) run ./cmd/onnx-conformance -write docs/onnx-conformance.md

# Fails when a case that passes in the committed table stops passing.
conformance-check: pjrt testdata
	$(GO) run ./cmd/onnx-conformance -check docs/onnx-conformance.md

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime 5m ./importer/onnx

examples: venv
	$(VENV)/bin/python python/make_examples.py

bench-models: venv
	$(VENV)/bin/python python/make_bench_models.py --out .cache/bench

bench: pjrt venv bench-models
	XSERVE_BENCH_MODELS=$(CURDIR)/.cache/bench XSERVE_PYTHON=$(CURDIR)/$(VENV)/bin/python \
	  $(GO) test -run '^$$' -bench 'TraceOnce' -benchtime 20x -timeout 60m ./lower

clean:
	rm -rf bin .cache/run-output
