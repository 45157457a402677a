#!/usr/bin/env bash
# Cold-start compile time with the buckets of each model compiled one at a
# time (--compile-parallelism 1) and in parallel (0: one per CPU), A/B
# interleaved on the same repository: resnet18, mobilenet_v2 and bert from
# testdata/zoo, buckets batch [1, 2, 4, 8] (bert also sequence [8, 16]), each
# run on an empty compile cache. Usage: bench/compile-parallel.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
make -s build >/dev/null
repo=$(mktemp -d); trap 'rm -rf "$repo"' EXIT
for m in resnet18 mobilenet_v2 bert; do
	mkdir -p "$repo/$m/1"
	cp "testdata/zoo/$m/model.onnx" "$repo/$m/1/model.onnx"
	printf 'buckets:\n  batch: [1, 2, 4, 8]\n' >"$repo/$m/config.yaml"
done
printf '  sequence: [8, 16]\n' >>"$repo/bert/config.yaml"
echo "CPUs: $(nproc)"
for i in $(seq "$runs"); do
	for p in 1 0; do
		cache=$(mktemp -d)
		start=$(date +%s.%N)
		bin/xserve compile --model-repo "$repo" --compile-cache "$cache" --compile-parallelism "$p" >/dev/null 2>&1
		end=$(date +%s.%N)
		rm -rf "$cache"
		printf 'run %d parallelism %s: %.1f s\n' "$i" "$([ "$p" = 0 ] && echo "$(nproc) (default)" || echo 1)" "$(echo "$end - $start" | bc)"
	done
done
