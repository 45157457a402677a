#!/usr/bin/env bash
# docker-test.sh builds the xserve images and checks them for real (run by
# `make docker-test`, which `make test` runs).
#
#  1. A Docker daemon: Debian's docker.io is installed when there is no
#     dockerd, and dockerd is started when none answers (with
#     "bridge": "none", "iptables": false: containers use --network host).
#  2. The base images the Dockerfile names, made locally when they are not
#     there (no image registry is reachable from these machines):
#     debian:bookworm-slim from debootstrap + `docker import`, and
#     golang:1.26-bookworm on top of it with gcc and a Go 1.26 toolchain (this
#     machine's Go when it is 1.26, else go1.26 through the Go module proxy).
#     Both carry the host's CA bundle (HTTPS may go through a proxy the host
#     trusts). They are labelled org.xserve.stand-in and kept for the next run.
#  3. The CPU image is built and run with examples/models mounted: readiness,
#     an HTTP and a NATS inference checked against ONNX Runtime's output,
#     /metrics, then a clean SIGTERM shutdown; a second start on the same
#     compile cache must compile nothing, and so must a start on a cache that
#     `xserve compile` made.
#  4. The TPU and CUDA images are built; their plugin must load and report
#     that no device is present. In every image `xserve version` must name
#     the plugin's package and the StableHLO versions it accepts.
#  5. Everything it made but the stand-in base images is removed, and the
#     dockerd it started (if it started one) is stopped.
#
# Environment: XSERVE_DOCKER_KEEP=1 keeps the test images and the dockerd it
# started (faster reruns);
# XSERVE_DOCKER_VARIANTS (default "cpu tpu cuda") picks the variants to build;
# XSERVE_DOCKER_WORK (default /var/tmp/xserve-docker) holds the stand-ins' rootfs.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${XSERVE_DOCKER_WORK:-/var/tmp/xserve-docker}"
VARIANTS="${XSERVE_DOCKER_VARIANTS:-cpu tpu cuda}"
PY="${PYTHON:-$REPO/.venv/bin/python}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
RUNTIME_IMAGE="debian:bookworm-slim"
GO_IMAGE="golang:1.26-bookworm"
GO_SERIES="go1.26"
IMAGE="xserve-test"
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

log() { echo "docker-test: $*"; }
die() { echo "docker-test: FAIL: $*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

CONTAINERS=()
TMPDIRS=()
cleanup() {
	local rc=$?
	for c in "${CONTAINERS[@]}"; do
		if [[ $rc != 0 ]]; then
			echo "---- logs of $c"
			docker logs --tail 50 "$c" 2>&1 || true
		fi
		docker rm -f -v "$c" >/dev/null 2>&1 || true
	done
	for d in "${TMPDIRS[@]}"; do rm -rf "$d"; done
	if [[ "${XSERVE_DOCKER_KEEP:-0}" != 1 ]]; then
		for v in $VARIANTS; do docker rmi -f "$IMAGE:$v" >/dev/null 2>&1 || true; done
		# The build stages' images (labelled so by the Dockerfile), now dangling.
		docker image prune -f --filter "label=org.xserve.build-stage" >/dev/null 2>&1 || true
	fi
	stop_docker
	exit $rc
}
trap cleanup EXIT

# ---- 1. the daemon
STARTED_DOCKERD=0

# stop_docker stops the dockerd this script started, unless
# XSERVE_DOCKER_KEEP=1: left running, it and its containerd wake every few
# milliseconds, which benchmarks run afterwards on a small machine feel.
stop_docker() {
	[[ $STARTED_DOCKERD == 1 && "${XSERVE_DOCKER_KEEP:-0}" != 1 ]] || return 0
	local pid
	pid=$(cat /run/xserve-dockerd.pid 2>/dev/null) || return 0
	$SUDO kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 100); do
		$SUDO kill -0 "$pid" 2>/dev/null || { log "stopped the dockerd it started"; return 0; }
		sleep 0.2
	done
	log "dockerd (pid $pid) still running 20s after SIGTERM"
}

ensure_docker() {
	if docker info >/dev/null 2>&1; then
		log "docker daemon: $(docker version --format '{{.Server.Version}}')"
		return
	fi
	if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
		log "installing Debian's docker.io"
		$SUDO apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker.io >/dev/null
	fi
	if [[ ! -f /etc/docker/daemon.json ]]; then
		$SUDO mkdir -p /etc/docker
		echo '{"bridge": "none", "iptables": false, "ip6tables": false}' | $SUDO tee /etc/docker/daemon.json >/dev/null
	fi
	log "starting dockerd (log: /var/log/xserve-dockerd.log)"
	$SUDO bash -c 'nohup dockerd >/var/log/xserve-dockerd.log 2>&1 & echo $! >/run/xserve-dockerd.pid'
	STARTED_DOCKERD=1
	for _ in $(seq 120); do
		docker info >/dev/null 2>&1 && { log "docker daemon: $(docker version --format '{{.Server.Version}}')"; return; }
		sleep 0.5
	done
	tail -20 /var/log/xserve-dockerd.log >&2 || true
	die "dockerd did not come up in 60s"
}

# ---- 2. stand-in base images
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

copy_ca() { # rootfs
	mkdir -p "$1/etc/ssl/certs" "$1/usr/local/share/ca-certificates"
	cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"
	if [[ -d /usr/local/share/ca-certificates ]]; then
		cp -a /usr/local/share/ca-certificates/. "$1/usr/local/share/ca-certificates/"
	fi
}

make_debian() {
	if have_image "$RUNTIME_IMAGE"; then
		log "$RUNTIME_IMAGE: present"
		return
	fi
	command -v debootstrap >/dev/null || {
		log "installing debootstrap"
		$SUDO apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap >/dev/null
	}
	local t rootfs="$WORK/rootfs-bookworm"
	t=$(now)
	log "$RUNTIME_IMAGE: debootstrap bookworm (minbase) from $DEBIAN_MIRROR"
	$SUDO rm -rf "$rootfs"
	mkdir -p "$WORK"
	$SUDO debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
		{ tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
	copy_ca "$rootfs"
	$SUDO rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
	$SUDO tar -C "$rootfs" -c . | docker import \
		--change 'CMD ["bash"]' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'LABEL org.xserve.stand-in=1' \
		- "$RUNTIME_IMAGE" >/dev/null
	$SUDO rm -rf "$rootfs"
	log "$RUNTIME_IMAGE: made in $(since "$t")s"
}

go_root() { # prints the GOROOT of a $GO_SERIES toolchain
	if [[ "$(go env GOVERSION 2>/dev/null)" == "$GO_SERIES".* ]]; then
		go env GOROOT
	else
		# The module proxy serves Go toolchains as golang.org/toolchain.
		GOTOOLCHAIN="${GO_SERIES}.0" go env GOROOT
	fi
}

make_golang() {
	if have_image "$GO_IMAGE"; then
		log "$GO_IMAGE: present"
		return
	fi
	local t ctx goroot
	t=$(now)
	goroot=$(go_root)
	log "$GO_IMAGE: $RUNTIME_IMAGE + gcc + $("$goroot/bin/go" env GOVERSION) from $goroot"
	ctx=$(mktemp -d "$WORK/golang-ctx.XXXXXX")
	TMPDIRS+=("$ctx")
	cp -a "$goroot" "$ctx/go"
	copy_ca "$ctx/ca"
	cat >"$ctx/Dockerfile" <<-DOCKERFILE
		FROM $RUNTIME_IMAGE
		RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		    gcc libc6-dev git ca-certificates curl >/dev/null && rm -rf /var/lib/apt/lists/*
		COPY ca/ /
		COPY go /usr/local/go
		ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOTOOLCHAIN=local
		LABEL org.xserve.stand-in=1
		WORKDIR /go
	DOCKERFILE
	docker build -q --network host -t "$GO_IMAGE" "$ctx" >/dev/null
	log "$GO_IMAGE: made in $(since "$t")s"
}

# ---- 3./4. build and check
build_variant() { # variant
	local t
	t=$(now)
	log "building $IMAGE:$1 (PJRT=$1)"
	docker build --network host --build-arg PJRT="$1" -t "$IMAGE:$1" "$REPO" >"$WORK/build-$1.log" 2>&1 ||
		{ tail -40 "$WORK/build-$1.log" >&2; die "docker build PJRT=$1 failed (log: $WORK/build-$1.log)"; }
	local size
	size=$(docker image inspect --format '{{.Size}}' "$IMAGE:$1")
	log "built $IMAGE:$1 in $(since "$t")s: size $((size / 1000000)) MB"
	echo "$1 $size" >>"$WORK/sizes"
}

# free_port prints a loopback port that is free now, drawn below the kernel's
# ephemeral range: a port the kernel hands out (bind to 0) can be taken again
# by any outgoing connection, curl's included, before the container binds it.
free_port() {
	"$PY" - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(10000, max(low, 10001))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("no free port below %d" % low)
PY
}

# start_server NAME CACHE_DIR: runs the CPU image, sets HTTP and NATS.
start_server() {
	local name="$1" cache="$2"
	HTTP_PORT=$(free_port)
	NATS_PORT=$(free_port)
	HTTP="http://127.0.0.1:$HTTP_PORT"
	CONTAINERS+=("$name")
	docker run -d --name "$name" --network host \
		--health-cmd "xserve health --url $HTTP/v2/health/ready" --health-interval 1s --health-start-period 60s \
		-v "$REPO/examples/models:/models:ro" -v "$cache:/var/cache/xserve" \
		"$IMAGE:cpu" --http-addr "127.0.0.1:$HTTP_PORT" --nats-listen "127.0.0.1:$NATS_PORT" --grpc-addr 127.0.0.1:0 --poll-interval 0 >/dev/null
}

# wait_ready NAME START: sets READY_S, the seconds from START (now's format)
# until /v2/health/ready answers 200 (fails after 180s).
wait_ready() {
	local t=$2
	for _ in $(seq 1800); do
		if [[ "$(curl -s -o /dev/null -w '%{http_code}' "$HTTP/v2/health/ready")" == 200 ]]; then
			READY_S=$(since "$t")
			return
		fi
		if [[ "$(docker inspect --format '{{.State.Running}}' "$1")" != true ]]; then
			# Another process took a port between free_port and the bind.
			local logs
			logs=$(docker logs "$1" 2>&1 || true)
			[[ "$logs" != *"address already in use"* ]] || return 2
			tail -20 <<<"$logs" >&2
			die "container $1 exited before it was ready"
		fi
		sleep 0.1
	done
	die "$1 not ready after 180s"
}

# measure_start NAME CACHE_DIR LABEL: starts the server, sets READY_S (seconds
# to ready) and COMPILED (the sum of xserve_compilations_total once ready).
measure_start() {
	local t try
	for try in 1 2 3; do
		t=$(now)
		start_server "$1" "$2"
		wait_ready "$1" "$t" && break
		[[ $try -lt 3 ]] || die "container $1: its ports were taken on three tries"
		log "$1: a port was taken before the container bound it; retrying on new ports"
		docker rm -f "$1" >/dev/null
	done
	COMPILED=$(curl -sf "$HTTP/metrics" | awk '/^xserve_compilations_total/ { s += $NF } END { print s + 0 }')
	log "$3: ready in ${READY_S}s, xserve_compilations_total=$COMPILED"
}

check_cpu() {
	local cache out t
	cache=$(mktemp -d "$WORK/cache.XXXXXX")
	out=$(mktemp -d "$WORK/out.XXXXXX")
	TMPDIRS+=("$cache" "$out")
	chmod 0777 "$cache" "$out"

	# Cold start: empty compile cache.
	measure_start xserve-test-cold "$cache" "cold start (empty cache)"
	local cold=$READY_S
	[[ "$COMPILED" -gt 0 ]] || die "cold start compiled nothing"
	# Logs first, then grep: `docker logs | grep -q` fails under pipefail
	# when grep exits at the first match and docker logs gets SIGPIPE.
	local logs
	logs=$(docker logs xserve-test-cold 2>&1)
	grep -q 'msg="loaded CPU kernels"' <<<"$logs" ||
		die "the CPU image did not load its CPU kernel library (docker logs xserve-test-cold)"
	log "the CPU image loaded its CPU kernels (oneDNN convolutions)"
	check_versions cpu "$(docker run --rm --network none --no-healthcheck --entrypoint xserve "$IMAGE:cpu" version 2>&1)"

	# HTTP inference (Open Inference Protocol v2, JSON) against ONNX Runtime.
	"$PY" - "$HTTP" "$REPO/examples/samples/tinycnn" <<-'PYEOF' || die "HTTP inference"
		import json, sys, urllib.request
		import numpy as np
		url, samples = sys.argv[1], sys.argv[2]
		x = np.load(f"{samples}/image.npy")
		want = np.load(f"{samples}/probs.onnxruntime.npy")
		body = {"inputs": [{"name": "image", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]}
		req = urllib.request.Request(f"{url}/v2/models/tinycnn/infer", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
		out = json.load(urllib.request.urlopen(req, timeout=60))["outputs"][0]
		got = np.array(out["data"], dtype=np.float32).reshape(out["shape"])
		assert got.shape == want.shape, (got.shape, want.shape)
		np.testing.assert_allclose(got, want, atol=1e-5)
		print("docker-test: HTTP inference matches ONNX Runtime:", got.shape)
	PYEOF

	# NATS inference, sent by the image's own binary, signed in with the
	# client NKey seed the embedded server wrote (it takes no anonymous
	# clients); the copy is made readable for the client container's user.
	docker cp "xserve-test-cold:/var/cache/xserve/nats/$NATS_PORT/client.nk" "$out/client.nk" >/dev/null ||
		die "no client NKey seed in the container"
	chmod 0644 "$out/client.nk"
	docker run --rm --network host --entrypoint xserve \
		-v "$REPO/examples/samples/tinycnn:/samples:ro" -v "$out:/out" "$IMAGE:cpu" \
		nats-infer --nats-url "nats://127.0.0.1:$NATS_PORT" --nkey /out/client.nk --model tinycnn --input image=/samples/image.npy --output /out ||
		die "NATS inference"
	"$PY" -c 'import sys, numpy as np; np.testing.assert_allclose(np.load(sys.argv[1]), np.load(sys.argv[2]), atol=1e-5)' \
		"$out/probs.npy" "$REPO/examples/samples/tinycnn/probs.onnxruntime.npy" || die "NATS output differs from ONNX Runtime"
	log "NATS inference matches ONNX Runtime"

	# The image's HEALTHCHECK command (xserve health) turns the container healthy.
	for _ in $(seq 100); do
		[[ "$(docker inspect --format '{{.State.Health.Status}}' xserve-test-cold)" == healthy ]] && break
		sleep 0.2
	done
	[[ "$(docker inspect --format '{{.State.Health.Status}}' xserve-test-cold)" == healthy ]] || die "container never became healthy"
	log "HEALTHCHECK: healthy"

	stop_server xserve-test-cold

	# Warm start: the cache the cold start filled.
	measure_start xserve-test-warm "$cache" "warm start (cache of the cold start)"
	local warm=$READY_S
	[[ "$COMPILED" == 0 ]] || die "warm start compiled $COMPILED executables, want 0"
	stop_server xserve-test-warm

	# Baked cache: `xserve compile` into a fresh cache, then serve from it.
	local baked
	baked=$(mktemp -d "$WORK/baked.XXXXXX")
	TMPDIRS+=("$baked")
	chmod 0777 "$baked"
	t=$(now)
	docker run --rm --network none --entrypoint xserve \
		-v "$REPO/examples/models:/models:ro" -v "$baked:/var/cache/xserve" "$IMAGE:cpu" \
		compile --model-repo /models --compile-cache /var/cache/xserve/compile || die "xserve compile"
	log "xserve compile: $(since "$t")s"
	measure_start xserve-test-baked "$baked" "baked-cache start (xserve compile)"
	local baked_s=$READY_S
	[[ "$COMPILED" == 0 ]] || die "start on the cache xserve compile baked compiled $COMPILED executables, want 0"
	stop_server xserve-test-baked
	printf 'cold %s\nwarm %s\nbaked %s\n' "$cold" "$warm" "$baked_s" >"$WORK/starts"
}

# stop_server NAME: SIGTERM, then the container must exit 0 having logged "stopped".
stop_server() {
	local t
	t=$(now)
	docker stop --time 30 "$1" >/dev/null
	local code
	code=$(docker inspect --format '{{.State.ExitCode}}' "$1")
	[[ "$code" == 0 ]] || die "$1 exited $code after SIGTERM, want 0"
	grep -q 'msg=stopped' <<<"$(docker logs "$1" 2>&1)" || die "$1 did not log a clean stop"
	log "$1: SIGTERM -> exit 0 in $(since "$t")s"
}

check_no_device() { # variant
	local out rc=0
	# Off Google Cloud libtpu would retry the (unreachable) metadata server
	# for its topology: TPU_SKIP_MDS_QUERY makes it look for chips at once.
	out=$(timeout 300 docker run --rm --network none --no-healthcheck -e TPU_SKIP_MDS_QUERY=1 \
		--entrypoint xserve "$IMAGE:$1" version 2>&1) || rc=$?
	echo "$out" | sed "s/^/docker-test: [$1] /" | grep -v '^docker-test: \[.*\] [WIE][0-9]' | tail -5
	[[ $rc != 0 ]] || die "$1: xserve version succeeded without a device"
	grep -q "loads (PJRT C API" <<<"$out" || die "$1: the plugin did not load"
	grep -q "no device is usable" <<<"$out" || die "$1: no clear no-device message"
	check_versions "$1" "$out"
	log "$1: plugin loads and reports that no device is present"
}

# check_versions VARIANT OUTPUT: `xserve version` in the image names the
# plugin's package and the StableHLO versions it accepts (what the programs
# we emit must stay within, docs/DEPLOY.md); both are logged.
check_versions() {
	local pkg ver
	pkg=$(sed -n 's/^plugin package: //p' <<<"$2")
	ver=$(sed -n 's/^plugin version: //p' <<<"$2")
	[[ -n "$pkg" ]] || die "$1: xserve version names no plugin package"
	[[ "$ver" == *stablehlo_current_version=* && "$ver" == *stablehlo_minimum_version=* ]] ||
		die "$1: xserve version shows no StableHLO versions: plugin version: $ver"
	log "$1: plugin package $pkg; PJRT C API $ver"
}

main() {
	local t0
	t0=$(now)
	mkdir -p "$WORK"
	rm -f "$WORK/sizes"
	[[ -x "$PY" ]] || die "$PY not found (run make venv)"
	ensure_docker
	make_debian
	make_golang
	for v in $VARIANTS; do
		build_variant "$v"
		case "$v" in
		cpu) check_cpu ;;
		*) check_no_device "$v" ;;
		esac
	done
	log "image sizes (bytes): $(tr '\n' ' ' <"$WORK/sizes")"
	log "PASS in $(since "$t0")s"
}

main "$@"
exit
