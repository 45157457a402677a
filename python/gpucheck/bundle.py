"""The bundle of binaries the GPU host runs (it has no Go): bin/gpu-check/
holds xserve.gz and loadtest.gz (stripped, gzipped) and MANIFEST.json (their
sha256, the newest glibc symbol version each needs, the commit and a hash of
the Go and cgo sources they were built from).

    python -m gpucheck.bundle manifest DIR REPO COMMIT GLIBC_MAX  (scripts/gpu-check-bundle.sh)
    python -m gpucheck.bundle unpack DIR DEST REPO                 (scripts/gpu-check.sh)

Standard library only: it runs before anything else is known to work.
"""

import gzip
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys

BINARIES = ("xserve", "loadtest")
SOURCE_SUFFIXES = (".go", ".c", ".h")
SKIP_DIRS = {"bin", "zoo", "testdata", "node_modules"}


def source_hash(repo):
    """sha256 over the non-test Go and cgo sources and go.mod/go.sum under
    repo (hidden directories, bin/, zoo/ and testdata/ left out), so a
    bundle can be told from one built of other sources."""
    h = hashlib.sha256()
    files = []
    for root, dirs, names in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        for n in names:
            if (n.endswith(SOURCE_SUFFIXES) and not n.endswith("_test.go")) or (root == repo and n in ("go.mod", "go.sum")):
                files.append(os.path.relpath(os.path.join(root, n), repo))
    for rel in sorted(files):
        with open(os.path.join(repo, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest(), len(files)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _version_tuple(v):
    return tuple(int(p) for p in v.split("."))


def manifest(bundle, repo, commit, glibc_max, needs):
    """Writes bundle/MANIFEST.json for the binaries staged as bundle/NAME
    (uncompressed, gzipped beside them by the caller). needs maps each binary
    to the newest GLIBC_x.y its symbols reference."""
    src, n = source_hash(repo)
    m = {"commit": commit, "source_sha256": src, "source_files": n, "glibc_max": glibc_max,
         "glibc_required": max(needs.values(), key=_version_tuple), "files": {}}
    for b in BINARIES:
        m["files"][b] = {"gz": b + ".gz", "sha256": _sha256(os.path.join(bundle, b)),
                         "bytes": os.path.getsize(os.path.join(bundle, b)),
                         "gz_bytes": os.path.getsize(os.path.join(bundle, b + ".gz")), "glibc": needs[b]}
    with open(os.path.join(bundle, "MANIFEST.json"), "w") as f:
        json.dump(m, f, indent=1, sort_keys=True)
        f.write("\n")


def host_glibc():
    lib, ver = platform.libc_ver()
    if lib != "glibc" or not ver:
        try:
            out = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout
            ver = out.splitlines()[0].rsplit(" ", 1)[-1]
        except (OSError, IndexError):
            return None
    return ver


def unpack(bundle, dest, repo):
    """Checks the bundle against this host and the source tree, unpacks the
    binaries into dest and prints "NAME=PATH" lines (and STALE=... when the
    sources differ from the ones the bundle was built from)."""
    mf = os.path.join(bundle, "MANIFEST.json")
    if not os.path.exists(mf):
        sys.exit(f"gpu-check: no bundle at {bundle} (run `make gpu-check-bundle` where Go is installed, and carry {bundle})")
    with open(mf) as f:
        m = json.load(f)
    have = host_glibc()
    if have is None:
        sys.exit("gpu-check: this host's C library is not glibc (or its version is unknown); the bundle needs glibc "
                 f"{m['glibc_required']} or newer")
    if _version_tuple(have) < _version_tuple(m["glibc_required"]):
        sys.exit(f"gpu-check: this host has glibc {have}; the bundled binaries need {m['glibc_required']} or newer")
    os.makedirs(dest, exist_ok=True)
    for b, info in m["files"].items():
        out = os.path.join(dest, b)
        tmp = out + ".tmp"
        with gzip.open(os.path.join(bundle, info["gz"]), "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        if _sha256(tmp) != info["sha256"]:
            os.remove(tmp)
            sys.exit(f"gpu-check: {bundle}/{info['gz']} does not unpack to the binary MANIFEST.json names (sha256 differs)")
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
        print(f"{b.upper()}={out}")
    src, _ = source_hash(repo)
    if src != m["source_sha256"]:
        print(f"STALE=the bundle was built from other sources than these (commit {m['commit']}); run make gpu-check-bundle")


def main(argv):
    if len(argv) >= 1 and argv[0] == "manifest" and len(argv) >= 5:
        needs = dict(kv.split("=", 1) for kv in argv[5:])
        manifest(argv[1], argv[2], argv[3], argv[4], needs)
    elif len(argv) == 4 and argv[0] == "unpack":
        unpack(argv[1], argv[2], argv[3])
    elif len(argv) == 2 and argv[0] == "source-hash":
        print(source_hash(argv[1])[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
