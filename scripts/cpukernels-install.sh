#!/usr/bin/env bash
# cpukernels-install.sh builds xserve's CPU kernel library (cpukernels/: XLA
# FFI custom calls computed by oneDNN) and installs it next to the XLA CPU
# plugin, where the pjrt package loads it (run by `make pjrt`, after
# pjrt-install.sh):
#
#   <plugin dir>/libxserve_cpukernels.so   built from cpukernels/*.c
#   <plugin dir>/libdnnl.so.3              oneDNN 3.2 (GNU OpenMP build)
#
# oneDNN comes from the PyPI wheels onednn-cpu-gomp==2023.2.0 (the library)
# and onednn-devel-cpu-gomp==2023.2.0 (its headers), pinned by sha256 and
# unpacked under $XSERVE_CACHE/onednn/. The library is rebuilt when a source
# file is newer than it; otherwise this is a no-op.
#
# Environment:
#   XSERVE_CACHE        cache root (default <repo>/.cache)
#   XSERVE_PJRT_DIR     directory of the CPU plugin (default: the one
#                       pjrt-install.sh installs)
#   XSERVE_ONEDNN_WHEELS  directory holding both wheels already downloaded
#                       (their sha256 is checked all the same)
#   PYTHON, CC          python interpreter (python3), C compiler (gcc)
set -euo pipefail

readonly ONEDNN_VERSION="2023.2.0"
readonly LIB_WHEEL="onednn_cpu_gomp-${ONEDNN_VERSION}-py2.py3-none-manylinux1_x86_64.whl"
readonly LIB_SHA256="2f22a54d6a890ed14bfa185d42a4be65d8b5b1df85dc1f0f3a9abe31620416fb"
readonly DEV_WHEEL="onednn_devel_cpu_gomp-${ONEDNN_VERSION}-py2.py3-none-manylinux1_x86_64.whl"
readonly DEV_SHA256="9763c69e8c907e119056bd52ad918ca84ac9ba939d130a99dfa95ccca3e5e284"
readonly KERNELS="libxserve_cpukernels.so"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${XSERVE_CACHE:-$REPO/.cache}"
# The plugin directory scripts/pjrt-install.sh installs by default (the pins
# of its "current" case, read from it).
pjrt_pin() { sed -n "/^current)/,/;;/ s/^[[:space:]]*$1=\"\(.*\)\"\$/\1/p" "$REPO/scripts/pjrt-install.sh"; }
PJRT_DIR="${XSERVE_PJRT_DIR:-$CACHE/pjrt/$(pjrt_pin PKG_NAME)-$(pjrt_pin PKG_VERSION)}"
ONEDNN="$CACHE/onednn/${ONEDNN_VERSION}"
PY="${PYTHON:-python3}"
CC="${CC:-gcc}"

log() { echo "cpukernels: $*"; }
die() { echo "cpukernels: error: $*" >&2; exit 1; }

[[ -d "$PJRT_DIR" ]] || die "no CPU plugin directory $PJRT_DIR (run scripts/pjrt-install.sh first)"
case "$(uname -s)/$(uname -m)" in
Linux/x86_64 | Linux/amd64) ;;
*) die "the oneDNN wheels used here exist for x86_64 Linux only, this is $(uname -s)/$(uname -m)" ;;
esac

# oneDNN: headers and library, unpacked once.
if [[ ! -f "$ONEDNN/lib/libdnnl.so.3" || ! -f "$ONEDNN/include/oneapi/dnnl/dnnl.h" ]]; then
	mkdir -p "$CACHE/onednn"
	TMP="$(mktemp -d "$CACHE/onednn/.install.XXXXXX")"
	trap 'rm -rf "$TMP"' EXIT
	for w in "$LIB_WHEEL" "$DEV_WHEEL"; do
		if [[ -n "${XSERVE_ONEDNN_WHEELS:-}" ]]; then
			cp "$XSERVE_ONEDNN_WHEELS/$w" "$TMP/" || die "XSERVE_ONEDNN_WHEELS has no $w"
		fi
	done
	if [[ ! -f "$TMP/$LIB_WHEEL" || ! -f "$TMP/$DEV_WHEEL" ]]; then
		log "downloading onednn-cpu-gomp and onednn-devel-cpu-gomp ${ONEDNN_VERSION} from PyPI"
		"$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$TMP" \
			"onednn-cpu-gomp==${ONEDNN_VERSION}" "onednn-devel-cpu-gomp==${ONEDNN_VERSION}" ||
			die "pip download of oneDNN ${ONEDNN_VERSION} failed (offline? set XSERVE_ONEDNN_WHEELS)"
	fi
	for pair in "$LIB_WHEEL:$LIB_SHA256" "$DEV_WHEEL:$DEV_SHA256"; do
		w="${pair%%:*}" want="${pair##*:}"
		[[ -f "$TMP/$w" ]] || die "expected $w after download, got: $(ls "$TMP")"
		got="$(sha256sum "$TMP/$w" | cut -d' ' -f1)"
		[[ "$got" == "$want" ]] || die "sha256 mismatch for $w: got $got, want $want"
	done
	log "unpacking oneDNN ${ONEDNN_VERSION}"
	"$PY" - "$TMP" "$TMP/stage" "$LIB_WHEEL" "$DEV_WHEEL" <<'EOF'
import os, shutil, sys, zipfile
tmp, stage, lib, dev = sys.argv[1:5]
for wheel in (lib, dev):
    with zipfile.ZipFile(os.path.join(tmp, wheel)) as z:
        for m in z.infolist():
            parts = m.filename.split("/")
            # <name>.data/data/{lib,include}/...
            if len(parts) < 4 or parts[1] != "data" or parts[2] not in ("lib", "include") or m.is_dir():
                continue
            if parts[2] == "lib" and parts[-1] != "libdnnl.so.3":
                continue  # one copy of the library (the wheel has three, no symlinks)
            out = os.path.join(stage, *parts[2:])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(m) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
os.chmod(os.path.join(stage, "lib", "libdnnl.so.3"), 0o755)
EOF
	rm -rf "$ONEDNN"
	mv -T "$TMP/stage" "$ONEDNN"
fi

# The kernel library, rebuilt when a source is newer.
OUT="$PJRT_DIR/$KERNELS"
stale=0
[[ -f "$OUT" && -f "$PJRT_DIR/libdnnl.so.3" ]] || stale=1
for f in "$REPO"/cpukernels/* "${BASH_SOURCE[0]}"; do
	[[ "$f" -nt "$OUT" ]] && stale=1
done
if [[ "$stale" == 0 ]]; then
	log "$KERNELS is up to date at $OUT"
	exit 0
fi
command -v "$CC" >/dev/null 2>&1 || die "$CC not found (needed to build $KERNELS)"
log "building $KERNELS against oneDNN ${ONEDNN_VERSION}"
CC="$CC" "$REPO/cpukernels/build.sh" "$ONEDNN" "$PJRT_DIR"
log "installed $OUT"
