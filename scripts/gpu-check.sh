#!/usr/bin/env bash
# gpu-check.sh: the GPU check in one command (make gpu-check; docs/GPU.md).
#
#   scripts/gpu-check.sh [--mode auto|gpu|cpu] [--out DIR] [--work DIR]
#                        [--pjrt-plugin PATH|WHEEL|cuda] [--python PY] [--budget SECONDS]
#
# On a GPU host it finds the CUDA PJRT plugin, makes three models with the
# host's torch, checks `xserve run` and `xserve serve` outputs against torch
# on the GPU, times served xserve (binary HTTP, gRPC) against torch eager,
# torch.compile and JAX jit, and dynamic batching on/off, and writes
# report.json and report.md to --out (default .cache/gpu-check). Without a
# GPU it runs the same steps on the CPU plugin with small models (the dry
# run, about 2 minutes; make test runs it). It exits 0 when every step ran
# and every output matched.
#
# The binaries come from the bundle (bin/gpu-check, scripts/gpu-check-bundle.sh,
# built here when Go is installed and no bundle exists); the GPU host needs
# no Go, no network and no pip install: only a Python with torch and numpy
# (and JAX for the JAX column).
#
# Environment: GPU_CHECK_MODE, GPU_CHECK_OUT, GPU_CHECK_WORK (default
# .cache/gpu-check-work: models and inputs, kept out of --out),
# GPU_CHECK_PYTHON, GPU_CHECK_PJRT_PLUGIN, GPU_CHECK_BUDGET, GPU_CHECK_BUNDLE.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
MODE="${GPU_CHECK_MODE:-auto}"
OUT="${GPU_CHECK_OUT:-.cache/gpu-check}"
WORK="${GPU_CHECK_WORK:-.cache/gpu-check-work}"
PY="${GPU_CHECK_PYTHON:-}"
PLUGIN="${GPU_CHECK_PJRT_PLUGIN:-}"
BUDGET="${GPU_CHECK_BUDGET:-0}"
BUNDLE="${GPU_CHECK_BUNDLE:-bin/gpu-check}"

die() { echo "gpu-check: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
	case "$1" in
	--mode) MODE="$2"; shift 2 ;;
	--out) OUT="$2"; shift 2 ;;
	--work) WORK="$2"; shift 2 ;;
	--pjrt-plugin) PLUGIN="$2"; shift 2 ;;
	--python) PY="$2"; shift 2 ;;
	--budget) BUDGET="$2"; shift 2 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
case "$MODE" in auto | gpu | cpu) ;; *) die "--mode $MODE: want auto, gpu or cpu" ;; esac

# A Python with torch and numpy: the host's own (python3 on a GPU host), or
# the repository's .venv-zoo here.
if [[ -z "$PY" ]]; then
	for c in python3 python /usr/bin/python3 /usr/local/bin/python3 /opt/conda/bin/python "$REPO/.venv-zoo/bin/python"; do
		if command -v "$c" >/dev/null 2>&1 &&
			"$c" -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("torch") and u.find_spec("numpy") else 1)' 2>/dev/null; then
			PY="$c"
			break
		fi
	done
	[[ -n "$PY" ]] || die "no Python with torch and numpy found (tried python3, python, /opt/conda/bin/python, .venv-zoo); set GPU_CHECK_PYTHON"
fi
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1

if [[ ! -f "$BUNDLE/MANIFEST.json" ]] && command -v "${GO:-go}" >/dev/null; then
	scripts/gpu-check-bundle.sh
fi
mkdir -p "$OUT" "$WORK"
unpacked=$("$PY" -m gpucheck.bundle unpack "$BUNDLE" "$WORK/bin" "$REPO") || exit 2
XSERVE=$(sed -n 's/^XSERVE=//p' <<<"$unpacked")
LOADTEST=$(sed -n 's/^LOADTEST=//p' <<<"$unpacked")
STALE=$(sed -n 's/^STALE=//p' <<<"$unpacked")

args=(--mode "$MODE" --xserve "$XSERVE" --xserve-source "bundle $BUNDLE" --loadtest "$LOADTEST"
	--manifest "$BUNDLE/MANIFEST.json" --out "$OUT" --work "$WORK" --wheel-dir "$BUNDLE")
[[ -z "$PLUGIN" ]] || args+=(--pjrt-plugin "$PLUGIN")
[[ "$BUDGET" == 0 ]] || args+=(--budget "$BUDGET")
[[ -z "$STALE" ]] || args+=(--stale "$STALE")
echo "gpu-check: mode $MODE, python $PY, report in $OUT" >&2
exec "$PY" -m gpucheck "${args[@]}"
