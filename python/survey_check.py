"""Checks the ATen survey (python/survey_aten.py) against xserve: for every
exported model under .cache/aten-survey/, imports it (`xserve inspect`),
runs it on PJRT at the check batch (`xserve run`, a batch other than the
export example's) and compares with torch eager's outputs.

    go build -o /tmp/xserve ./cmd/xserve
    go build -o /tmp/atenops ./importer/fx/internal/atenops
    .venv-zoo/bin/python python/survey_check.py /tmp/xserve /tmp/atenops [NAME ...]

Prints one line per model and a summary (exported / imports / matches), and
writes .cache/aten-survey/check.json. atenops lists every operator of a
model that the importer does not support.
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

OUT = os.path.join(".cache", "aten-survey")
RTOL, ATOL = 1e-3, 1e-3


def first_line(text):
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def unsupported(atenops, ops):
    # getitem of a multi-output operator is no node in the saved program.
    ops = [("_operator." + o[len("<built-in function "):-1]) if o.startswith("<built-in function ") else o for o in ops]
    ops = [o for o in ops if o != "_operator.getitem"]
    p = subprocess.run([atenops], input="\n".join(ops), capture_output=True, text=True, check=True)
    return p.stdout.split()


def check(xs, name, info):
    pt2 = os.path.join(OUT, name + ".pt2")
    res = {"name": name}
    p = subprocess.run([xs, "inspect", pt2], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        err = first_line(p.stderr)
        res["import_error"] = err[:600]
        return res
    res["imported"] = True
    d = os.path.join(OUT, name)
    args = [xs, "run", pt2]
    for nm in info["inputs"]:
        args += ["--input", "%s=%s" % (nm, os.path.join(d, "in_%s.npy" % nm))]
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(args + ["--output", tmp], capture_output=True, text=True, timeout=1200)
        if p.returncode != 0:
            res["run_error"] = first_line(p.stderr)[:600]
            return res
        worst = 0.0
        for k, on in enumerate(info["outputs"]):
            want = np.load(os.path.join(d, "out_%d.npy" % k))
            fn = os.path.join(tmp, re.sub(r"[^A-Za-z0-9_.-]", "_", on) + ".npy")
            if not os.path.exists(fn):
                res["run_error"] = "no output %s" % on
                return res
            got = np.load(fn)
            if got.shape != want.shape:
                res["mismatch"] = "output %s: shape %s, want %s" % (on, got.shape, want.shape)
                return res
            if want.dtype.kind in "fc":
                scale = np.maximum(np.abs(want.astype(np.float64)), 1.0)
                err = float(np.max(np.abs(got.astype(np.float64) - want) / scale)) if want.size else 0.0
            else:
                err = float(np.count_nonzero(got != want))
            worst = max(worst, err)
        res["max_err"] = worst
        res["matches"] = bool(worst <= ATOL)
    return res


def main():
    xs, atenops = sys.argv[1], sys.argv[2]
    names = sys.argv[3:] or sorted(os.path.basename(f)[:-5] for f in glob.glob(os.path.join(OUT, "*.json"))
                                   if not f.endswith("check.json"))
    results = []
    for name in names:
        with open(os.path.join(OUT, name + ".json")) as f:
            info = json.load(f)
        if "error" in info:
            res = {"name": name, "export_error": info["error"][:300]}
        else:
            try:
                res = check(xs, name, info)
                res["unsupported"] = unsupported(atenops, info["ops"])
            except subprocess.TimeoutExpired:
                res = {"name": name, "run_error": "timeout"}
        res["dynamic"] = info.get("dynamic")
        results.append(res)
        status = ("EXPORT-FAIL " + res["export_error"][:100] if "export_error" in res else
                  "IMPORT-FAIL " + (" ".join(res["unsupported"]) or res["import_error"][-300:]) if "import_error" in res else
                  "RUN-FAIL " + res["run_error"][:200] if "run_error" in res else
                  "MISMATCH " + res["mismatch"] if "mismatch" in res else
                  ("ok" if res["matches"] else "WRONG") + " max_err=%.2g" % res["max_err"])
        print("%-40s %-10s %s" % (name, res["dynamic"], status), flush=True)
    exported = [r for r in results if "export_error" not in r]
    imported = [r for r in exported if r.get("imported")]
    matched = [r for r in imported if r.get("matches")]
    print("exported %d/%d, import %d/%d, match %d/%d" % (len(exported), len(results), len(imported), len(exported),
                                                          len(matched), len(exported)))
    ops = {}
    for r in results:
        for op in r.get("unsupported") or []:
            ops.setdefault(op, []).append(r["name"])
    for op, users in sorted(ops.items(), key=lambda kv: -len(kv[1])):
        print("unsupported %-45s %3d  %s" % (op, len(users), " ".join(users[:6])))
    if len(sys.argv) == 3:
        with open(os.path.join(OUT, "check.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
