#!/usr/bin/env bash
# pjrt-install.sh installs the XLA CPU PJRT plugin used by xserve (run by `make pjrt`).
#
# The plugin is the shared library lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so from
# the PyPI wheel lammps-jax-pjrt-cpu==0.11.2: XLA's CPU PJRT plugin built from the
# XLA of jaxlib 0.11.2 (PJRT C API 0.115, StableHLO 1.20). It is installed as
#
#   ${XSERVE_CACHE:-<repo>/.cache}/pjrt/lammps-jax-pjrt-cpu-0.11.2/pjrt_c_api_cpu_plugin.so
#
# next to a VERSION file, where the pjrt package (pjrt.FindPlugin) looks for it.
# Running it again is a no-op once the plugin is there.
#
# `pjrt-install.sh compat` (make pjrt-compat) installs instead the oldest CPU
# plugin we test against, xla-cpu-pjrt==0.0.1 (PJRT C API 0.81, StableHLO
# 1.13.3: the vintage of the CUDA and TPU plugins the images ship), as
#
#   ${XSERVE_CACHE:-<repo>/.cache}/pjrt-compat/xla-cpu-pjrt-0.0.1/pjrt_c_api_cpu_plugin.so
#
# outside pjrt/, where pjrt.FindPlugin never picks it: `make compat-test` hands
# it to the tests by XSERVE_PJRT_PLUGIN.
#
# Environment:
#   XSERVE_CACHE        cache root (default <repo>/.cache)
#   XSERVE_PJRT_WHEEL   path of an already downloaded wheel to use instead of pip
#                       (its sha256 is checked all the same)
#   PYTHON              python interpreter (default python3)
set -euo pipefail

readonly PLUGIN_NAME="pjrt_c_api_cpu_plugin.so"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${XSERVE_CACHE:-$REPO/.cache}"
case "${1:-current}" in
current)
	PKG_NAME="lammps-jax-pjrt-cpu"
	PKG_VERSION="0.11.2"
	WHEEL_SHA256="1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1"
	MEMBER="lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so"
	ROOT="$CACHE/pjrt"
	;;
compat)
	PKG_NAME="xla-cpu-pjrt"
	PKG_VERSION="0.0.1"
	WHEEL_SHA256="55837b6b7b47daa717f2d9a5a03563ea0ceaa338d06a81a1e2d3f060d960decc"
	MEMBER="xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so"
	ROOT="$CACHE/pjrt-compat"
	;;
*)
	echo "usage: $0 [current|compat]" >&2
	exit 2
	;;
esac
readonly PKG_NAME PKG_VERSION WHEEL_SHA256 MEMBER ROOT
readonly WHEEL="${PKG_NAME//-/_}-${PKG_VERSION}-py3-none-manylinux_2_27_x86_64.whl"
DEST="$ROOT/${PKG_NAME}-${PKG_VERSION}"
PY="${PYTHON:-python3}"

log() { echo "pjrt: $*"; }
die() { echo "pjrt: error: $*" >&2; exit 1; }

# The plugin pinned before (xla-cpu-pjrt 0.0.1, PJRT C API 0.81) ignores the
# asynchronous=false create option pjrt.Open passes; pjrt.FindPlugin takes the
# first of $CACHE/pjrt/*/ in name order, so remove it rather than leave the
# choice to the names.
for old in "$ROOT"/xla-cpu-pjrt-*; do
	[[ "$ROOT" == "$CACHE/pjrt" ]] || break
	if [[ -d "$old" ]]; then
		log "removing the plugin pinned before, $old"
		rm -rf "$old"
	fi
done

if [[ -s "$DEST/$PLUGIN_NAME" && -f "$DEST/VERSION" ]]; then
	log "${PKG_NAME} ${PKG_VERSION} already installed at $DEST/$PLUGIN_NAME"
	exit 0
fi

case "$(uname -s)/$(uname -m)" in
Linux/x86_64 | Linux/amd64) ;;
*) die "the ${PKG_NAME} wheel only exists for x86_64 Linux, this is $(uname -s)/$(uname -m)" ;;
esac
command -v "$PY" >/dev/null 2>&1 || die "$PY not found (needed to download and unpack the wheel)"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"

mkdir -p "$ROOT"
TMP="$(mktemp -d "$ROOT/.install.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

if [[ -n "${XSERVE_PJRT_WHEEL:-}" ]]; then
	[[ -f "$XSERVE_PJRT_WHEEL" ]] || die "XSERVE_PJRT_WHEEL=$XSERVE_PJRT_WHEEL is not a file"
	log "using wheel $XSERVE_PJRT_WHEEL"
	cp "$XSERVE_PJRT_WHEEL" "$TMP/$WHEEL"
else
	log "downloading ${PKG_NAME}==${PKG_VERSION} from PyPI"
	"$PY" -m pip download --quiet --no-deps --only-binary=:all: \
		--platform manylinux_2_27_x86_64 --python-version 3 --implementation py \
		--dest "$TMP" "${PKG_NAME}==${PKG_VERSION}" ||
		die "pip download of ${PKG_NAME}==${PKG_VERSION} failed (offline? set XSERVE_PJRT_WHEEL=/path/to/$WHEEL)"
fi
[[ -f "$TMP/$WHEEL" ]] || die "expected $WHEEL after download, got: $(ls "$TMP")"

log "checking sha256 of $WHEEL"
got="$(sha256sum "$TMP/$WHEEL" | cut -d' ' -f1)"
if [[ "$got" != "$WHEEL_SHA256" ]]; then
	die "sha256 mismatch for $WHEEL: got $got, want $WHEEL_SHA256"
fi

log "extracting $MEMBER"
"$PY" - "$TMP/$WHEEL" "$MEMBER" "$TMP/$PLUGIN_NAME" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
chmod 0755 "$TMP/$PLUGIN_NAME"
printf '%s %s\nwheel %s\nsha256 %s\n' "$PKG_NAME" "$PKG_VERSION" "$WHEEL" "$WHEEL_SHA256" >"$TMP/VERSION"

# Build the final directory next to DEST, then rename it into place: readers never
# see a half-written plugin.
STAGE="$TMP/stage"
mkdir "$STAGE"
mv "$TMP/$PLUGIN_NAME" "$TMP/VERSION" "$STAGE/"
if [[ -e "$DEST" ]]; then
	# A partial install (plugin or VERSION missing): move it out of the way.
	mv "$DEST" "$TMP/old"
fi
mv -T "$STAGE" "$DEST"
log "installed ${PKG_NAME} ${PKG_VERSION} at $DEST/$PLUGIN_NAME ($(du -h "$DEST/$PLUGIN_NAME" | cut -f1))"
