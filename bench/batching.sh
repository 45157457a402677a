#!/usr/bin/env bash
# batching.sh measures dynamic batching: one xserve serves each benchmark
# model twice, with batching on (<model>_batched) and off (<model>_unbatched),
# plus its floor (floor_<model>_unbatched: its input, no compute), and
# cmd/loadtest drives the three at each concurrency in short interleaved
# rounds, so that the machine's load drifts over all of them alike. It prints
# one markdown table for docs/BENCHMARKS.md (bench/batching_runs.py) and,
# per model, the most batching could gain on this machine
# (bench/batching_ceiling.py).
#
#   bench/batching.sh
#
# A run of one copy at one concurrency is ROUNDS rounds of DURATION each,
# every round of the three copies back to back (the order rotating from
# round to round); its throughput is its requests over its measured time.
# Each (model, concurrency) has REPEAT runs; the table gives, for on/off
# and on/ceiling, the median of the per-run ratios (each ratio pairs runs
# taken in the same minute), and the medians of the runs' throughputs,
# latencies and server CPU per request.
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
#   DURATION       measured time per round (default 3s)
#   ROUNDS         interleaved rounds per run (default 3)
#   WARMUP         unmeasured warmup of a (model, concurrency)'s first round
#                  of each copy (default 2s)
#   ROUND_WARMUP   unmeasured warmup of every later round (default 0.5s:
#                  the closed loop refills its connections)
#   REPEAT         runs per model, concurrency and copy (default 3)
#   DELAY          batching.max_queue_delay of the batched copies (default 2ms)
#   OUT            directory for the repository, JSON summaries and server log
#                  (default .cache/bench-batching)
#   READY_TIMEOUT  seconds to wait for the server to be ready (default 300)
#   PYTHON         Python with onnx and numpy (default .venv/bin/python; make venv)
#   XSERVE_FLAGS   extra flags for `xserve serve`
#   CEILING        "no" leaves the floors out of the rounds and skips the
#                  ceiling (quick A/B runs of the batching policy; default yes)
#   XSERVE_BIN     an xserve binary to serve with instead of building
#                  bin/xserve from the working tree (e.g. one built from
#                  another commit, to compare batching policies)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

MODELS="${MODELS:-cnn transformer}"
CONCURRENCY="${CONCURRENCY:-1 8 32 64}"
DURATION="${DURATION:-3s}"
ROUNDS="${ROUNDS:-3}"
WARMUP="${WARMUP:-2s}"
ROUND_WARMUP="${ROUND_WARMUP:-0.5s}"
REPEAT="${REPEAT:-3}"
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

# server_ticks prints the CPU time (user + system, in clock ticks) the
# server process has used.
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }

# The client's CPU time, where GNU time is there: a request costs the
# machine the client's work too, the same with batching on or off.
CLIENT_TIME=()
[[ -x /usr/bin/time ]] && CLIENT_TIME=(/usr/bin/time -f "%U %S" -o)

# drive NAME MODEL C FILE WARMUP: loadtest on served model NAME with
# MODEL's input at concurrency C after WARMUP, its summary in FILE.json,
# the server's CPU ticks at the end of the warmup and of the run in
# FILE.cpu, and the client's user and system seconds (warmup included) in
# FILE.client.
drive() {
	(sleep "$5" && server_ticks >"$4.cpu0") &
	local waiter=$!
	# shellcheck disable=SC2046
	"${CLIENT_TIME[@]}" ${CLIENT_TIME:+"$4.client"} bin/loadtest -url "$URL" -model "$1" -protocol v2binary $(input "$2") \
		-c "$3" -d "$DURATION" -warmup "$5" -json "$4.json" >"$4.txt" ||
		{ cat "$4.txt" >&2; die "$1 at concurrency $3 failed"; }
	local end
	end="$(server_ticks)"
	wait "$waiter" || true
	echo "$(cat "$4.cpu0" 2>/dev/null || echo 0) $end" >"$4.cpu"
	grep -E 'throughput|latency' "$4.txt" | sed 's/^/    /' >&2
}

rm -rf "$OUT"/runs/*.json "$OUT"/runs/*.txt "$OUT"/runs/*.cpu "$OUT"/runs/*.cpu0 "$OUT/runs/rounds"
mkdir -p "$OUT/runs/rounds"
rot=0
for m in $MODELS; do
	# One validated request per copy first: the table means nothing if the answers are wrong.
	for copy in unbatched batched; do
		# shellcheck disable=SC2046
		bin/loadtest -url "$URL" -model "${m}_$copy" -protocol v2binary $(input "$m") \
			-c 1 -n 4 -d 0 -warmup 0 -validate >"$OUT/runs/check-${m}_$copy.txt" ||
			{ cat "$OUT/runs/check-${m}_$copy.txt" >&2; die "the validation run of ${m}_$copy failed"; }
	done
	names=("${m}_unbatched" "${m}_batched")
	[[ "$CEILING" == no ]] || names+=("floor_${m}_unbatched")
	for c in $CONCURRENCY; do
		for ((r = 1; r <= REPEAT; r++)); do
			for ((k = 1; k <= ROUNDS; k++)); do
				# Rotate which copy goes first, so that a drift in the
				# machine's load favours none of them.
				order=("${names[@]:rot}" "${names[@]:0:rot}")
				rot=$(((rot + 1) % ${#names[@]}))
				warm="$ROUND_WARMUP"
				((r == 1 && k == 1)) && warm="$WARMUP"
				for name in "${order[@]}"; do
					log "$name, concurrency $c, run $r/$REPEAT, round $k/$ROUNDS: ${warm} warmup, ${DURATION} measured"
					drive "$name" "$m" "$c" "$OUT/runs/rounds/$name-c$c-r$r-k$k" "$warm"
				done
			done
			for name in "${names[@]}"; do
				"$PYTHON" bench/batching_runs.py merge --tck "$(getconf CLK_TCK)" \
					--out "$OUT/runs/$name-c$c-r$r.json" "$OUT/runs/rounds/$name-c$c-r$r-k"*.json
			done
		done
	done
done
curl -sf "$URL/metrics" >"$OUT/metrics.txt" || true

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
echo
echo "Dynamic batching off vs on, batch-1 requests (OIP binary), closed loop; each run $ROUNDS rounds of ${DURATION}"
echo "(after ${WARMUP} warmup, then ${ROUND_WARMUP} a round), the copies interleaved round by round; $REPEAT runs,"
echo "max_queue_delay ${DELAY}; client and server on the same host: ${cpu:-unknown CPU}, $(nproc 2>/dev/null || echo '?') CPUs,"
echo "$("$GO" env GOVERSION), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+changes'), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo "Command: \`MODELS=\"$MODELS\" CONCURRENCY=\"$CONCURRENCY\" DURATION=$DURATION ROUNDS=$ROUNDS REPEAT=$REPEAT DELAY=$DELAY bench/batching.sh\`."
echo
"$PYTHON" bench/batching_runs.py table --runs "$OUT/runs" --models "$MODELS" --concurrency "$CONCURRENCY"
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
