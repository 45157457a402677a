#!/usr/bin/env bash
# gpu-check-bundle.sh builds what the GPU host cannot (it has no Go): the
# xserve and loadtest binaries, stripped and gzipped, with MANIFEST.json, in
# bin/gpu-check/ (about 20 MB; carried to the host beside the source tree,
# docs/GPU.md). make gpu-check runs it first.
#
# The binaries link glibc dynamically (cgo: the PJRT plugins are dlopen'ed,
# which a static glibc cannot do). Each may reference no glibc symbol
# version newer than GLIBC_MAX (2.34: Ubuntu 22.04 has 2.35, Debian 12 2.36,
# RHEL 9 2.34), checked here with objdump; the host's glibc is checked
# against the newest one they do reference when the bundle is unpacked.
#
# Environment: GO (default go), PYTHON (default python3: the standard
# library only), GPU_CHECK_BUNDLE (default bin/gpu-check), GLIBC_MAX.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
GO="${GO:-go}"
PY="${PYTHON:-python3}"
DEST="${GPU_CHECK_BUNDLE:-bin/gpu-check}"
GLIBC_MAX="${GLIBC_MAX:-2.34}"

die() { echo "gpu-check-bundle: $*" >&2; exit 1; }
command -v objdump >/dev/null || die "objdump not found (Debian's binutils)"

mkdir -p "$DEST"
needs=()
for cmd in xserve loadtest; do
	"$GO" build -ldflags="-s -w" -o "$DEST/$cmd" "./cmd/$cmd"
	need=$(objdump -T "$DEST/$cmd" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
	[[ -n "$need" ]] || die "$cmd references no versioned glibc symbol: is it linked dynamically?"
	if [[ "$(printf '%s\n%s\n' "$need" "$GLIBC_MAX" | sort -V | tail -1)" != "$GLIBC_MAX" ]]; then
		die "$cmd needs GLIBC_$need, newer than GLIBC_$GLIBC_MAX (build it on an older glibc, e.g. in a Debian 11 or Ubuntu 22.04 container)"
	fi
	gzip -6 -n -c "$DEST/$cmd" >"$DEST/$cmd.gz"
	needs+=("$cmd=$need")
done
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then commit="$commit+dirty"; fi
PYTHONPATH="$REPO/python" "$PY" -m gpucheck.bundle manifest "$DEST" "$REPO" "$commit" "$GLIBC_MAX" "${needs[@]}"
rm -f "$DEST/xserve" "$DEST/loadtest"
echo "gpu-check-bundle: $DEST: $(du -sh "$DEST" | cut -f1) (${needs[*]}, glibc <= $GLIBC_MAX)"
