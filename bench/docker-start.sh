#!/usr/bin/env bash
# docker-start.sh measures how long the xserve container takes to become ready
# with an empty compile cache (cold) and with a cache baked by `xserve compile`
# (warm), and how many executables each start compiled (xserve_compilations_total
# in /metrics: the warm start must show 0). It prints a markdown table for
# docs/BENCHMARKS.md.
#
#   XSERVE_DOCKER_KEEP=1 XSERVE_DOCKER_VARIANTS=cpu make docker-test   # builds xserve-test:cpu and keeps it
#   bench/docker-start.sh
#
# The model repository is made from the zoo fixtures (testdata/zoo: resnet50,
# mobilenet_v2 and the BERT-shaped encoder, ONNX), each with warmup: eager and
# batch buckets 1, 2, 4, 8 (BERT: sequence 16, 32, 64), so that a cold start
# compiles 4+4+12 executables before it is ready.
#
# Environment: IMAGE (default xserve-test:cpu), RUNS (default 3).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${IMAGE:-xserve-test:cpu}"
RUNS="${RUNS:-3}"
WORK=$(mktemp -d /var/tmp/xserve-docker-start.XXXXXX)
NAME="xserve-bench-start-$$"
trap 'docker rm -f "$NAME" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT

docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "no image $IMAGE: run XSERVE_DOCKER_KEEP=1 make docker-test first" >&2; exit 1; }

models="$WORK/models"
for m in resnet50 mobilenet_v2 bert; do
	mkdir -p "$models/$m/1"
	cp "$REPO/testdata/zoo/$m/model.onnx" "$models/$m/1/"
	if [[ $m == bert ]]; then
		printf 'warmup: eager\nbuckets:\n  batch: [1, 2, 4, 8]\n  sequence: [16, 32, 64]\n' >"$models/$m/config.yaml"
	else
		printf 'warmup: eager\nbuckets:\n  batch: [1, 2, 4, 8]\n' >"$models/$m/config.yaml"
	fi
done

now() { date +%s.%N; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start CACHE: prints "SECONDS COMPILATIONS" for one start on that cache.
start() {
	local http t0 s c
	http=$(port)
	t0=$(now)
	docker run -d --name "$NAME" --network host -v "$models:/models:ro" -v "$1:/var/cache/xserve" "$IMAGE" \
		--http-addr "127.0.0.1:$http" --nats-listen 127.0.0.1:0 --poll-interval 0 >/dev/null
	until [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http/v2/health/ready")" == 200 ]]; do
		[[ "$(docker inspect --format '{{.State.Running}}' "$NAME")" == true ]] || { docker logs "$NAME" >&2; exit 1; }
		sleep 0.05
	done
	s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
	c=$(curl -sf "http://127.0.0.1:$http/metrics" | awk '/^xserve_compilations_total/ { n += $NF } END { print n + 0 }')
	docker stop --time 30 "$NAME" >/dev/null
	docker rm "$NAME" >/dev/null
	echo "$s $c"
}

echo "| run | cold start: ready (s) | compilations | xserve compile (s) | warm start: ready (s) | compilations |"
echo "|---|---|---|---|---|---|"
for i in $(seq "$RUNS"); do
	cold="$WORK/cold-$i" baked="$WORK/baked-$i"
	mkdir -p "$cold" "$baked"
	chmod 0777 "$cold" "$baked"
	read -r cs cc < <(start "$cold")
	t0=$(now)
	docker run --rm --network none --entrypoint xserve -v "$models:/models:ro" -v "$baked:/var/cache/xserve" "$IMAGE" \
		compile --model-repo /models --compile-cache /var/cache/xserve/compile >"$WORK/compile-$i.log"
	ct=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
	read -r ws wc < <(start "$baked")
	echo "| $i | $cs | $cc | $ct | $ws | $wc |"
done
tail -1 "$WORK/compile-$RUNS.log" >&2
