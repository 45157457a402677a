#!/usr/bin/env bash
# batching.sh measures dynamic batching: one xserve serves each benchmark
# model twice, with batching on (<model>_batched) and off (<model>_unbatched),
# and cmd/loadtest drives both at each concurrency, alternating, in the same
# run; it prints one markdown table for docs/BENCHMARKS.md. It then drives
# each model's floor (floor_<model>_unbatched: its input, no compute) at
# each concurrency and prints, per model, the most batching could gain on
# this machine (bench/batching_ceiling.py).
#
#   bench/batching.sh
#
# The models (bench/make_batching_models.py, written into $OUT/models): a
# ResNet-shaped CNN on float32[1,3,32,32] images ("cnn") and a transformer
# encoder block on float32[1,32,256] ("transformer"); "cnn112" and
# "transformer128" are the same models on 112x112 images and 128 tokens.
# Batch buckets [1 2 4 8 16 32 64], every batching setting at its default
# but max_queue_delay ($DELAY), warmup eager. Every request carries one row
# (batch 1) in the binary tensor format of the Open Inference Protocol, so
# that JSON encoding does not dominate.
#
# Environment (all optional):
#   MODELS         models to run (default "cnn transformer"; also cnn112, transformer128)
#   CONCURRENCY    closed-loop concurrencies (default "1 8 32 64")
#   DURATION       measured time per run (default 8s)
#   WARMUP         unmeasured warmup per run (default 2s)
#   REPEAT         runs per model, concurrency and copy (default 1); the table
#                  shows, of each, the run of median throughput (the machines
#                  are shared and noisy: repeats keep one bad moment out)
#   DELAY          batching.max_queue_delay of the batched copies (default 2ms)
#   OUT            directory for the repository, JSON summaries and server log
#                  (default .cache/bench-batching)
#   READY_TIMEOUT  seconds to wait for the server to be ready (default 300)
#   PYTHON         Python with onnx and numpy (default .venv/bin/python; make venv)
#   XSERVE_FLAGS   extra flags for `xserve serve`
#   CEILING        "no" skips the floors and the ceiling (quick A/B runs of
#                  the batching policy; default yes)
#   XSERVE_BIN     an xserve binary to serve with instead of building
#                  bin/xserve from the working tree (e.g. one built from
#                  another commit, to compare batching policies)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

MODELS="${MODELS:-cnn transformer}"
CONCURRENCY="${CONCURRENCY:-1 8 32 64}"
DURATION="${DURATION:-8s}"
WARMUP="${WARMUP:-2s}"
REPEAT="${REPEAT:-1}"
DELAY="${DELAY:-2ms}"
OUT="${OUT:-.cache/bench-batching}"
READY_TIMEOUT="${READY_TIMEOUT:-300}"
PYTHON="${PYTHON:-.venv/bin/python}"
CEILING="${CEILING:-yes}"
GO="${GO:-go}"

log() { echo "bench/batching: $*" >&2; }
die() { echo "bench/batching: error: $*" >&2; exit 1; }

command -v curl >/dev/null 2>&1 || die "curl not found (needed to wait for the server)"
[[ -x "$PYTHON" ]] || die "$PYTHON not found: run \`make venv\` (or set PYTHON)"
mkdir -p "$OUT/runs" bin

log "writing the models into $OUT/models"
rm -rf "$OUT/models"
"$PYTHON" bench/make_batching_models.py --out "$OUT" --models "$MODELS" --max-queue-delay "$DELAY" >&2
XSERVE_BIN="${XSERVE_BIN:-}"
if [[ -z "$XSERVE_BIN" ]]; then
	log "building bin/xserve"
	"$GO" build -o bin/xserve ./cmd/xserve
	XSERVE_BIN=bin/xserve
fi
[[ -x "$XSERVE_BIN" ]] || die "XSERVE_BIN=$XSERVE_BIN is not an executable"
log "building bin/loadtest"
"$GO" build -o bin/loadtest ./cmd/loadtest

SERVER_PID=""
stop_server() {
	if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
		log "stopping xserve (pid $SERVER_PID)"
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 18081)"
URL="http://127.0.0.1:$PORT"
log "starting $XSERVE_BIN serve --model-repo $OUT/models on 127.0.0.1:$PORT (log: $OUT/xserve.log)"
# shellcheck disable=SC2086 # XSERVE_FLAGS is a list of flags
"$XSERVE_BIN" serve --model-repo "$OUT/models" --http-addr "127.0.0.1:$PORT" --grpc-addr 127.0.0.1:0 --poll-interval 0 ${XSERVE_FLAGS:-} >"$OUT/xserve.log" 2>&1 &
SERVER_PID=$!

deadline=$((SECONDS + READY_TIMEOUT))
for name in $(for m in $MODELS; do echo "${m}_batched ${m}_unbatched floor_${m}_unbatched"; done); do
	until curl -sf -o /dev/null "$URL/v2/models/$name/ready"; do
		kill -0 "$SERVER_PID" 2>/dev/null || { tail -n 30 "$OUT/xserve.log" >&2; die "xserve exited (log above)"; }
		((SECONDS < deadline)) || die "model $name not ready after ${READY_TIMEOUT}s (log: $OUT/xserve.log)"
		sleep 0.5
	done
done
log "all models ready"

# input returns the loadtest input flag of model $1.
input() {
	case "$1" in
	cnn | cnn112) echo "-input image=$OUT/inputs/$1.image.npy" ;;
	transformer | transformer128) echo "-input x=$OUT/inputs/$1.x.npy" ;;
	*) die "unknown model $1" ;;
	esac
}

# median prints the one of the given loadtest JSON summaries whose
# throughput is the median (the lower middle for an even count).
median() {
	"$PYTHON" -c '
import json, sys
runs = sorted(sys.argv[1:], key=lambda f: json.load(open(f))["success_throughput_rps"])
print(runs[(len(runs) - 1) // 2])' "$@"
}

# server_ticks prints the CPU time (user + system, in clock ticks) the
# server process has used.
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }

# drive NAME MODEL C RUN: loadtest on served model NAME with MODEL's input
# at concurrency C, its summary in $OUT/runs/RUN.json, and the server's CPU
# ticks at the end of the warmup and of the run in $OUT/runs/RUN.cpu.
drive() {
	(sleep "$WARMUP" && server_ticks >"$OUT/runs/$4.cpu0") &
	local waiter=$!
	# shellcheck disable=SC2046
	bin/loadtest -url "$URL" -model "$1" -protocol v2binary $(input "$2") \
		-c "$3" -d "$DURATION" -warmup "$WARMUP" -json "$OUT/runs/$4.json" >"$OUT/runs/$4.txt" ||
		{ cat "$OUT/runs/$4.txt" >&2; die "$1 at concurrency $3 failed"; }
	local end
	end="$(server_ticks)"
	wait "$waiter" || true
	echo "$(cat "$OUT/runs/$4.cpu0" 2>/dev/null || echo 0) $end" >"$OUT/runs/$4.cpu"
	grep -E 'throughput|latency' "$OUT/runs/$4.txt" | sed 's/^/    /' >&2
}

rm -f "$OUT"/runs/*.json "$OUT"/runs/*.txt
pairs=()
flip=0
for m in $MODELS; do
	# One validated request per copy first: the table means nothing if the answers are wrong.
	for copy in unbatched batched; do
		# shellcheck disable=SC2046
		bin/loadtest -url "$URL" -model "${m}_$copy" -protocol v2binary $(input "$m") \
			-c 1 -n 4 -d 0 -warmup 0 -validate >"$OUT/runs/check-${m}_$copy.txt" ||
			{ cat "$OUT/runs/check-${m}_$copy.txt" >&2; die "the validation run of ${m}_$copy failed"; }
	done
	for c in $CONCURRENCY; do
		for ((r = 1; r <= REPEAT; r++)); do
			# Alternate which copy goes first, so that a drift in the
			# machine's load does not favour one side.
			order="unbatched batched"
			((flip ^= 1)) || order="batched unbatched"
			for copy in $order; do
				run="${m}_$copy-c$c-r$r"
				onoff=off
				[[ "$copy" == batched ]] && onoff=on
				log "$m, batching $onoff, concurrency $c, run $r/$REPEAT: ${WARMUP} warmup, ${DURATION} measured"
				drive "${m}_$copy" "$m" "$c" "$run"
			done
		done
		pairs+=("$m c=$c=$(median "$OUT/runs/${m}_unbatched-c$c-r"*.json),$(median "$OUT/runs/${m}_batched-c$c-r"*.json)")
	done
done
# The floors: each model's requests with (almost) no compute, for the
# ceiling below.
[[ "$CEILING" == no ]] || for m in $MODELS; do
	for c in $CONCURRENCY; do
		for ((r = 1; r <= REPEAT; r++)); do
			run="floor_${m}_unbatched-c$c-r$r"
			log "floor of $m (its input, no compute), concurrency $c, run $r/$REPEAT: ${WARMUP} warmup, ${DURATION} measured"
			drive "floor_${m}_unbatched" "$m" "$c" "$run"
		done
	done
done
curl -sf "$URL/metrics" >"$OUT/metrics.txt" || true

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
echo
echo "Dynamic batching off vs on, batch-1 requests (OIP binary), closed loop, ${DURATION} per run after ${WARMUP} warmup"
echo "(median of $REPEAT runs by throughput, the two copies alternating),"
echo "max_queue_delay ${DELAY}; client and server on the same host: ${cpu:-unknown CPU}, $(nproc 2>/dev/null || echo '?') CPUs,"
echo "$("$GO" env GOVERSION), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+changes')."
echo "Command: \`MODELS=\"$MODELS\" CONCURRENCY=\"$CONCURRENCY\" DURATION=$DURATION WARMUP=$WARMUP REPEAT=$REPEAT DELAY=$DELAY bench/batching.sh\`."
echo
bin/loadtest -compare -compare-names off,on "${pairs[@]}"
echo
echo "The server's CPU time per request (user + system of the xserve process over the measured"
echo "window, over the requests answered in it; median of the $REPEAT runs): what a request costs"
echo "the machine, which other jobs on the host change far less than they change throughput."
echo
"$PYTHON" - "$OUT/runs" "$(getconf CLK_TCK)" "$MODELS" "$CONCURRENCY" <<'PY'
import glob, json, statistics, sys
runs, tck, models, conc = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def per_request(f):
    s = json.load(open(f))
    t0, t1 = (float(x) for x in open(f[:-5] + ".cpu").read().split())
    n = s["successes"]
    return (t1 - t0) / tck * 1e3 / n if t0 > 0 and n > 0 else float("nan")
print("| run | off CPU ms/request | on CPU ms/request | on/off |")
print("|---|---:|---:|---:|")
for m in models:
    for c in conc:
        v = [statistics.median(per_request(f) for f in sorted(glob.glob(f"{runs}/{m}_{k}-c{c}-r*.json"))) for k in ("unbatched", "batched")]
        print(f"| {m} c={c} | {v[0]:.3f} | {v[1]:.3f} | {v[1] / v[0]:.2f}x |")
PY
echo
echo "Batches the batched copies ran (xserve_batch_rows, real rows):"
echo
for m in $MODELS; do
	count="$(grep -E "^xserve_batch_rows_count\{kind=\"real\",model=\"${m}_batched\"" "$OUT/metrics.txt" | awk '{print $2}')"
	sum="$(grep -E "^xserve_batch_rows_sum\{kind=\"real\",model=\"${m}_batched\"" "$OUT/metrics.txt" | awk '{print $2}')"
	padded="$(grep -E "^xserve_batch_rows_sum\{kind=\"padded\",model=\"${m}_batched\"" "$OUT/metrics.txt" | awk '{print $2}')"
	limits="$(grep -E "^xserve_batch_size_limit\{model=\"${m}_batched\"" "$OUT/metrics.txt" | sed -E 's/.*queue="([^"]*)".* ([0-9]+)$/\1: \2/' | paste -sd, - | sed 's/,/, /g')"
	if [[ -n "$count" && "$count" != 0 ]]; then
		awk -v m="$m" -v n="$count" -v s="$sum" -v p="$padded" -v l="$limits" \
			'BEGIN { printf "- `%s_batched`: %d batches, %.1f real rows per batch on average, %.1f padded; learned batch size limit at the end (queue: rows) %s\n", m, n, s / n, p / n, l }'
	fi
done
[[ "$CEILING" == no ]] && exit 0
echo
echo "The most batching could gain here (bench/batching_ceiling.py): a request costs at least its"
echo "floor's (the same input through the same HTTP path and client, no compute) plus its row's FLOPs"
echo "at the CPU's peak, or its cheapest row measured."
echo
"$GO" build -o bin/bench-runner ./cmd/bench-runner
"$PYTHON" bench/batching_ceiling.py --out "$OUT" --models "$MODELS" --concurrency "$CONCURRENCY" --runner bin/bench-runner
