#!/usr/bin/env bash
# http.sh measures xserve's HTTP serving throughput and latency on the tinycnn
# example model with the load generator (cmd/loadtest), at several closed-loop
# concurrencies, and prints a markdown table for docs/BENCHMARKS.md.
#
#   bench/http.sh                     # start bin/xserve serve on a free loopback port, bench it, stop it
#   XSERVE_URL=http://127.0.0.1:8080 bench/http.sh   # bench a server that is already running
#
# Environment (all optional):
#   XSERVE_URL     bench this running server instead of starting one (loopback only)
#   MODEL          model name (default tinycnn)
#   MODEL_REPO     model repository for the server it starts (default examples/models)
#   PROTOCOL       v1json, v2json or v2binary (default v1json)
#   CONCURRENCY    concurrencies to run (default "1 8 32")
#   DURATION       measured time per concurrency (default 10s)
#   WARMUP         unmeasured warmup per concurrency (default 2s)
#   INPUT          the -input or -random flag of loadtest (default: row by row from
#                  examples/samples/tinycnn/image.npy, batch 1)
#   OUT            directory for the JSON summaries and the server log
#                  (default .cache/bench-http)
#   READY_TIMEOUT  seconds to wait for the started server to be ready (default 180)
#   XSERVE_FLAGS   extra flags for `xserve serve`
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

MODEL="${MODEL:-tinycnn}"
MODEL_REPO="${MODEL_REPO:-examples/models}"
PROTOCOL="${PROTOCOL:-v1json}"
CONCURRENCY="${CONCURRENCY:-1 8 32}"
DURATION="${DURATION:-10s}"
WARMUP="${WARMUP:-2s}"
INPUT="${INPUT:--input image=examples/samples/tinycnn/image.npy}"
OUT="${OUT:-.cache/bench-http}"
READY_TIMEOUT="${READY_TIMEOUT:-180}"
GO="${GO:-go}"

log() { echo "bench/http: $*" >&2; }
die() { echo "bench/http: error: $*" >&2; exit 1; }

command -v curl >/dev/null 2>&1 || die "curl not found (needed to wait for the server)"
mkdir -p "$OUT" bin

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

free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
	else
		echo 18080
	fi
}

if [[ -n "${XSERVE_URL:-}" ]]; then
	URL="${XSERVE_URL%/}"
	log "using the running server at $URL"
else
	log "building bin/xserve"
	"$GO" build -o bin/xserve ./cmd/xserve
	bin/xserve serve -h >/dev/null 2>&1 || die "bin/xserve has no working 'serve' command yet"
	PORT="$(free_port)"
	URL="http://127.0.0.1:$PORT"
	log "starting bin/xserve serve --model-repo $MODEL_REPO --http-addr 127.0.0.1:$PORT (log: $OUT/xserve.log)"
	# shellcheck disable=SC2086 # XSERVE_FLAGS is a list of flags
	bin/xserve serve --model-repo "$MODEL_REPO" --http-addr "127.0.0.1:$PORT" --grpc-addr 127.0.0.1:0 ${XSERVE_FLAGS:-} >"$OUT/xserve.log" 2>&1 &
	SERVER_PID=$!
fi

# unavailable reports whether the repository index (JSON) lists $MODEL as UNAVAILABLE.
unavailable() {
	if command -v jq >/dev/null 2>&1; then
		jq -e --arg m "$MODEL" 'any(.[]?; .name == $m and .state == "UNAVAILABLE")' <<<"$1" >/dev/null 2>&1
	else
		[[ "$1" == *"\"name\":\"$MODEL\""*"\"UNAVAILABLE\""* ]]
	fi
}

log "waiting for $URL/v2/health/ready and model $MODEL"
deadline=$((SECONDS + READY_TIMEOUT))
until curl -sf -o /dev/null "$URL/v2/health/ready" && curl -sf -o /dev/null "$URL/v2/models/$MODEL/ready"; do
	if [[ -n "$SERVER_PID" ]] && ! kill -0 "$SERVER_PID" 2>/dev/null; then
		tail -n 30 "$OUT/xserve.log" >&2 || true
		die "xserve exited before it was ready (log above, full log in $OUT/xserve.log)"
	fi
	# A model that failed to load will not become ready: say why at once.
	if index="$(curl -sf -X POST "$URL/v2/repository/index" 2>/dev/null)" && unavailable "$index"; then
		die "model $MODEL is UNAVAILABLE: $index"
	fi
	if ((SECONDS >= deadline)); then
		[[ -n "$SERVER_PID" ]] && tail -n 30 "$OUT/xserve.log" >&2
		die "not ready after ${READY_TIMEOUT}s"
	fi
	sleep 0.2
done

# One validated request first: the table means nothing if the answers are wrong.
# shellcheck disable=SC2086 # INPUT is a flag and its value
bin/loadtest -url "$URL" -model "$MODEL" -protocol "$PROTOCOL" $INPUT -batch 1 \
	-c 1 -n 4 -d 0 -warmup 0 -expect probs=1x10 >"$OUT/check.txt" ||
	{ cat "$OUT/check.txt" >&2; die "the validation run failed"; }

files=()
for c in $CONCURRENCY; do
	log "concurrency $c: ${WARMUP} warmup, ${DURATION} measured"
	# shellcheck disable=SC2086
	bin/loadtest -url "$URL" -model "$MODEL" -protocol "$PROTOCOL" $INPUT -batch 1 \
		-c "$c" -d "$DURATION" -warmup "$WARMUP" -json "$OUT/c$c.json" >"$OUT/c$c.txt" ||
		{ cat "$OUT/c$c.txt" >&2; die "the run at concurrency $c failed"; }
	cat "$OUT/c$c.txt" >&2
	files+=("$OUT/c$c.json")
done

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
echo
echo "xserve HTTP, model \`$MODEL\` (batch 1, protocol $PROTOCOL), closed loop, ${DURATION} per row after ${WARMUP} warmup;"
echo "client and server on the same host: ${cpu:-unknown CPU}, $(nproc 2>/dev/null || echo '?') CPUs, $("$GO" env GOVERSION), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
settings="CONCURRENCY=\"$CONCURRENCY\" DURATION=$DURATION WARMUP=$WARMUP PROTOCOL=$PROTOCOL"
[[ -z "${XSERVE_URL:-}" ]] && settings+=" MODEL_REPO=$MODEL_REPO"
echo "Command: \`$settings bench/http.sh\`."
echo
bin/loadtest -markdown "${files[@]}"
