#!/usr/bin/env bash
# Generation benchmark: xserve's generation loop vs ONNX Runtime GenAI (same
# ONNX file) vs transformers generate, eager and torch.compile (same
# weights), on a ~100M-parameter Llama, interleaved (python/generate/bench.py;
# docs/BENCHMARKS.md "Generation"). Model and exports are cached in
# .cache/gen-bench. Usage: bench/generate.sh [--rounds N] [--engines a,b,...]
set -euo pipefail
cd "$(dirname "$0")/.."
make -s pjrt tokenizers-lib .venv-zoo/.installed .venv-genai/.installed
go build -o bin/gen-bench ./cmd/gen-bench
exec .venv-zoo/bin/python python/generate/bench.py --runner bin/gen-bench "$@"
