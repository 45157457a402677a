#!/usr/bin/env bash
# nats.sh compares xserve's NATS request-reply with its HTTP API on the same
# server, model, payload and concurrency: it starts bin/xserve serve (HTTP and
# the embedded NATS server on free loopback ports), runs the load generator
# (cmd/loadtest) over HTTP and over NATS (plain, and durable through the
# JetStream work queue) at several closed-loop concurrencies, and prints
# markdown tables for docs/BENCHMARKS.md.
#
#   bench/nats.sh
#   CONCURRENCY="1 8 32" DURATION=5s bench/nats.sh
#
# Environment (all optional):
#   MODEL          model name (default tinycnn)
#   MODEL_REPO     model repository (default examples/models)
#   PROTOCOL       v1json, v2json or v2binary, for both transports (default v1json)
#   CONCURRENCY    concurrencies to run (default "1 8 32")
#   DURATION       measured time per run (default 5s)
#   WARMUP         unmeasured warmup per run (default 1s)
#   DURABLE        also run NATS durable requests: 1 or 0 (default 1)
#   INPUT          the -input or -random flag of loadtest (default: row by row from
#                  examples/samples/tinycnn/image.npy, batch 1)
#   OUT            directory for the JSON summaries and the server log (default .cache/bench-nats)
#   READY_TIMEOUT  seconds to wait for the server to be ready (default 180)
#   XSERVE_FLAGS   extra flags for `xserve serve`
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

MODEL="${MODEL:-tinycnn}"
MODEL_REPO="${MODEL_REPO:-examples/models}"
PROTOCOL="${PROTOCOL:-v1json}"
CONCURRENCY="${CONCURRENCY:-1 8 32}"
DURATION="${DURATION:-5s}"
WARMUP="${WARMUP:-1s}"
DURABLE="${DURABLE:-1}"
INPUT="${INPUT:--input image=examples/samples/tinycnn/image.npy}"
OUT="${OUT:-.cache/bench-nats}"
READY_TIMEOUT="${READY_TIMEOUT:-180}"
GO="${GO:-go}"

log() { echo "bench/nats: $*" >&2; }
die() { echo "bench/nats: error: $*" >&2; exit 1; }

command -v curl >/dev/null 2>&1 || die "curl not found (needed to wait for the server)"
mkdir -p "$OUT" bin

log "building bin/loadtest and bin/xserve"
"$GO" build -o bin/loadtest ./cmd/loadtest
"$GO" build -o bin/xserve ./cmd/xserve

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
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

HTTP_PORT="$(free_port)"
NATS_PORT="$(free_port)"
URL="http://127.0.0.1:$HTTP_PORT"
NATS="nats://127.0.0.1:$NATS_PORT"
STORE="$(mktemp -d)"
log "starting bin/xserve serve --model-repo $MODEL_REPO --http-addr 127.0.0.1:$HTTP_PORT --nats-listen 127.0.0.1:$NATS_PORT --nats-durable (log: $OUT/xserve.log)"
# shellcheck disable=SC2086 # XSERVE_FLAGS is a list of flags
bin/xserve serve --model-repo "$MODEL_REPO" --http-addr "127.0.0.1:$HTTP_PORT" --grpc-addr 127.0.0.1:0 \
	--nats-listen "127.0.0.1:$NATS_PORT" --nats-store "$STORE" --nats-durable ${XSERVE_FLAGS:-} >"$OUT/xserve.log" 2>&1 &
SERVER_PID=$!
trap 'stop_server; rm -rf "$STORE"' EXIT

log "waiting for $URL/v2/models/$MODEL/ready and the NATS endpoints"
deadline=$((SECONDS + READY_TIMEOUT))
until curl -sf -o /dev/null "$URL/v2/models/$MODEL/ready" && grep -q 'NATS endpoints registered' "$OUT/xserve.log"; do
	if ! kill -0 "$SERVER_PID" 2>/dev/null; then
		tail -n 30 "$OUT/xserve.log" >&2 || true
		die "xserve exited before it was ready (log above)"
	fi
	((SECONDS < deadline)) || die "not ready after ${READY_TIMEOUT}s"
	sleep 0.2
done

modes=(http nats)
[[ "$DURABLE" == 1 ]] && modes+=(durable)
target() { # the loadtest flags of a mode
	case "$1" in
	http) echo "-url $URL" ;;
	nats) echo "-nats $NATS" ;;
	durable) echo "-nats $NATS -durable" ;;
	esac
}

# One validated run per transport first: the numbers mean nothing if the answers are wrong.
for m in "${modes[@]}"; do
	# shellcheck disable=SC2046,SC2086
	bin/loadtest $(target "$m") -model "$MODEL" -protocol "$PROTOCOL" $INPUT -batch 1 \
		-c 1 -n 4 -d 0 -warmup 0 -expect probs=1x10 >"$OUT/check-$m.txt" 2>&1 ||
		{ cat "$OUT/check-$m.txt" >&2; die "the validation run over $m failed"; }
done

for c in $CONCURRENCY; do
	for m in "${modes[@]}"; do
		log "$m, concurrency $c: ${WARMUP} warmup, ${DURATION} measured"
		# shellcheck disable=SC2046,SC2086
		bin/loadtest $(target "$m") -model "$MODEL" -protocol "$PROTOCOL" $INPUT -batch 1 \
			-c "$c" -d "$DURATION" -warmup "$WARMUP" -json "$OUT/$m-c$c.json" >"$OUT/$m-c$c.txt" 2>&1 ||
			{ cat "$OUT/$m-c$c.txt" >&2; die "the $m run at concurrency $c failed"; }
		grep -E 'throughput|latency|failures' "$OUT/$m-c$c.txt" >&2 || true
	done
done

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)"
echo
echo "xserve NATS request-reply vs HTTP, model \`$MODEL\` (batch 1, protocol $PROTOCOL, the server's batching config),"
echo "closed loop, ${DURATION} per run after ${WARMUP} warmup; one xserve with the embedded NATS server;"
echo "client and server on the same host: ${cpu:-unknown CPU}, $(nproc 2>/dev/null || echo '?') CPUs, $("$GO" env GOVERSION), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
echo "Command: \`CONCURRENCY=\"$CONCURRENCY\" DURATION=$DURATION WARMUP=$WARMUP PROTOCOL=$PROTOCOL bench/nats.sh\`."
echo
compare() { # BASE TEST: a comparison table, or the two tables when -compare is not there
	local pairs=()
	for c in $CONCURRENCY; do pairs+=("c=$c=$OUT/$1-c$c.json,$OUT/$2-c$c.json"); done
	if ! bin/loadtest -compare -compare-names "$1,$2" "${pairs[@]}" 2>/dev/null; then
		for m in "$1" "$2"; do
			echo "$m:"
			echo
			files=()
			for c in $CONCURRENCY; do files+=("$OUT/$m-c$c.json"); done
			bin/loadtest -markdown "${files[@]}"
			echo
		done
	fi
}
compare http nats
if [[ "$DURABLE" == 1 ]]; then
	echo
	echo "Durable requests (JetStream work queue: publish, stored, pulled by the replica, reply to the client's inbox, ack):"
	echo
	compare http durable
fi
