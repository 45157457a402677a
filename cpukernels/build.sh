#!/usr/bin/env bash
# build.sh ONEDNN OUT builds libxserve_cpukernels.so from cpukernels/*.c
# against the oneDNN under ONEDNN (include/, lib/libdnnl.so.3) into the
# directory OUT, next to a copy of libdnnl.so.3, which the library finds
# there ($ORIGIN). scripts/cpukernels-install.sh (make pjrt) and the
# Dockerfile run it. With BUNDLE_GOMP=1 it copies the compiler's
# libgomp.so.1 too, for a runtime image that lacks it.
set -euo pipefail
[[ $# == 2 ]] || { echo "usage: $0 ONEDNN_DIR OUT_DIR" >&2; exit 2; }
ONEDNN="$1" OUT="$2"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CC="${CC:-gcc}"
mkdir -p "$OUT"
"$CC" -O2 -Wall -Wextra -Werror -fPIC -shared -I"$ONEDNN/include" \
	"$SRC"/*.c -L"$ONEDNN/lib" -l:libdnnl.so.3 -lgomp -lpthread -lm \
	-Wl,-rpath,'$ORIGIN' -Wl,--no-undefined -o "$OUT/libxserve_cpukernels.so.tmp"
cp "$ONEDNN/lib/libdnnl.so.3" "$OUT/libdnnl.so.3.tmp"
mv "$OUT/libdnnl.so.3.tmp" "$OUT/libdnnl.so.3"
if [[ "${BUNDLE_GOMP:-0}" == 1 ]]; then
	gomp="$("$CC" -print-file-name=libgomp.so.1)"
	[[ -f "$gomp" ]] || { echo "build.sh: libgomp.so.1 not found by $CC" >&2; exit 1; }
	cp -L "$gomp" "$OUT/libgomp.so.1"
fi
mv "$OUT/libxserve_cpukernels.so.tmp" "$OUT/libxserve_cpukernels.so"
