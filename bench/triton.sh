#!/usr/bin/env bash
# triton.sh runs Triton's perf_analyzer (from tritonclient[all]==2.41.1 in
# .venv-triton; `make venv-triton` installs it) against xserve over HTTP and
# over gRPC, one after the other on the same server and model, and prints a
# markdown table of throughput and latency per protocol and concurrency.
#
#   bench/triton.sh
#
# Environment (all optional):
#   MODEL_REPO     model repository (default examples/models)
#   MODEL          model (default tinycnn)
#   BATCH          perf_analyzer -b (default 1)
#   CONCURRENCY    --concurrency-range (default 1:8:7, i.e. 1 and 8)
#   INTERVAL       --measurement-interval in ms (default 2000)
#   STABILITY      --stability-percentage (default 50: the shared 2-core
#                  development machine rarely holds perf_analyzer's 10%)
#   OUT            directory for the CSVs and the server log (default .cache/bench-triton)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
MODEL_REPO="${MODEL_REPO:-examples/models}"
MODEL="${MODEL:-tinycnn}"
BATCH="${BATCH:-1}"
CONCURRENCY="${CONCURRENCY:-1:8:7}"
INTERVAL="${INTERVAL:-2000}"
STABILITY="${STABILITY:-50}"
OUT="${OUT:-.cache/bench-triton}"
GO="${GO:-go}"
PY=.venv-triton/bin/python

log() { echo "bench/triton: $*" >&2; }
die() { echo "bench/triton: error: $*" >&2; exit 1; }

[[ -x .venv-triton/bin/perf_analyzer ]] || die "no .venv-triton/bin/perf_analyzer: run make venv-triton"
CUDART="$($PY -c 'import nvidia.cuda_runtime, os; print(os.path.join(os.path.dirname(nvidia.cuda_runtime.__file__), "lib"))')"
export LD_LIBRARY_PATH="$CUDART${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$OUT" bin
"$GO" build -o bin/xserve ./cmd/xserve
ports=($($PY -c 'import socket
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'))
HTTP="127.0.0.1:${ports[0]}"
GRPC="127.0.0.1:${ports[1]}"
log "starting bin/xserve serve --model-repo $MODEL_REPO --http-addr $HTTP --grpc-addr $GRPC (log: $OUT/xserve.log)"
bin/xserve serve --model-repo "$MODEL_REPO" --http-addr "$HTTP" --grpc-addr "$GRPC" --poll-interval 0 >"$OUT/xserve.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; wait $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 180); do
	curl -sf "http://$HTTP/v2/health/ready" >/dev/null && break
	kill -0 "$SERVER_PID" 2>/dev/null || die "xserve exited (see $OUT/xserve.log)"
	sleep 1
done

echo "| protocol | concurrency | infer/s | p50 µs | p99 µs |"
echo "|---|---|---|---|---|"
for proto in http grpc; do
	url="$HTTP"
	[[ "$proto" == grpc ]] && url="$GRPC"
	log "perf_analyzer -i $proto -m $MODEL -b $BATCH --concurrency-range $CONCURRENCY"
	.venv-triton/bin/perf_analyzer -m "$MODEL" -u "$url" -i "$proto" -b "$BATCH" \
		--concurrency-range "$CONCURRENCY" --measurement-interval "$INTERVAL" \
		--stability-percentage "$STABILITY" --max-trials 20 \
		-f "$OUT/$proto.csv" >"$OUT/$proto.log" 2>&1 || { cat "$OUT/$proto.log" >&2; die "perf_analyzer -i $proto failed"; }
	$PY - "$OUT/$proto.csv" "$proto" <<'PYEOF'
import csv, sys
for row in csv.DictReader(open(sys.argv[1])):
    print(f"| {sys.argv[2]} | {row['Concurrency']} | {float(row['Inferences/Second']):.0f} | {row['p50 latency']} | {row['p99 latency']} |")
PYEOF
done
