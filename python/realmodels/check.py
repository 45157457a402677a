"""Runs the real-model suite (python/realmodels/generate.py's cases) through
`bin/xserve run` and through a real `xserve serve`, compares with the
references (torch eager / ONNX Runtime) and writes docs/real-models.md.

    python3 python/realmodels/check.py [--cases .cache/realmodels/cases] [--only SUBSTR,...] [--doc docs/real-models.md]

Needs only numpy (the project's .venv). Every case is one model file in one
format. `run` is one `xserve run` process per case; `serve` is one `xserve
serve` over a model repository of all cases (symlinks), on the loopback port
it picks itself (port 0, read from its log), with one KServe v2 HTTP request
per case: binary tensor data for even-numbered cases, JSON for odd ones. A
result is `match` when every output is within atol + rtol * max|ref| (tighter
for dynamically quantized models, which compute ORT's own quantization; looser
for QDQ models, where ORT and XLA may round a tie differently),
else `mismatch` with the max abs error, or the error the stage failed with.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import numpy as np

RTOL, ATOL = 1e-3, 1e-3
# Dynamically quantized models (quantize_dynamic, and the packages' int8
# models) compute ONNX Runtime's own arithmetic to the last bit (its
# quantization, MLAS's tanh and logistic): one value a quantization step off
# must fail, so they get 1e-5 + 1e-5 * max|ref|, as harness/realmodels.
DYNQ_TOL = 1e-5
# Statically quantized (QDQ) models: ONNX Runtime runs a QDQ Conv in float,
# and a conv output a few ulps from an int8 rounding tie lands on the
# adjacent step (docs/QUANTIZATION.md): 3e-2 relative.
QDQ_RTOL = 3e-2
# 16-bit floats: the tolerance follows the dtype's machine epsilon: atol and
# rtol of EPS_FACTOR * eps (float16 eps 2^-10: 1.6e-2; bfloat16 eps 2^-7:
# 1.25e-1), relative to the largest reference value like the float32 one.
EPS_FACTOR = 16
HALF_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
NP_TO_V2 = {"float32": "FP32", "float16": "FP16", "float64": "FP64", "int64": "INT64", "int32": "INT32",
            "bool": "BOOL", "uint8": "UINT8", "int8": "INT8"}
V2_TO_NP = {v: k for k, v in NP_TO_V2.items()}


def load_case(d):
    with open(os.path.join(d, "case.json")) as f:
        info = json.load(f)
    info["dir"] = d
    info["id"] = os.path.basename(d)
    files = sorted(os.listdir(d))
    info["model_file"] = next((os.path.join(d, f) for f in ("model.onnx", "model.pt2") if f in files), None)
    if info.get("export_error"):
        info["model_file"] = None  # exported, but the reference framework failed on it
    info["in_files"] = sorted((f for f in files if f.startswith("in.")), key=lambda f: int(f.split(".")[1]))
    info["ref_files"] = sorted((f for f in files if f.startswith("ref.")), key=lambda f: int(f.split(".")[1]))
    info["big_files"] = sorted((f for f in files if f.startswith("big.")), key=lambda f: int(f.split(".")[1]))
    info["bigref_files"] = sorted((f for f in files if f.startswith("bigref.")), key=lambda f: int(f.split(".")[1]))
    return info


def half_dtype(case):
    """float16 or bfloat16 when the case's model computes in it, else None."""
    src = case.get("source", "")
    for name in HALF_EPS:
        if f"({name})" in src:
            return name
    return None


def default_tolerance(case):
    """(atol, rtol) for case by its kind: dynamically or statically
    quantized, or float."""
    if case["format"] == "onnx-quant-static":
        return ATOL, QDQ_RTOL
    if "quant" in case["format"] or "_int8" in case["id"]:
        return DYNQ_TOL, DYNQ_TOL
    return ATOL, RTOL


def compare(case, got, ref_files=None):
    """got: list of arrays in output order. Returns (result, max_err).
    Strings and integers must be equal; floats within atol + rtol * max|ref|
    (case.json may set atol and rtol, and list outputs that must be the
    same bits in "exact"; a half-precision model's tolerance follows its
    dtype's epsilon)."""
    ref_files = ref_files or case["ref_files"]
    refs = [np.load(os.path.join(case["dir"], f)) for f in ref_files]
    if len(got) != len(refs):
        return f"mismatch: {len(got)} outputs, the reference has {len(refs)}", None
    atol, rtol = default_tolerance(case)
    rtol, atol = case.get("rtol", rtol), case.get("atol", atol)
    if half_dtype(case):
        rtol = atol = EPS_FACTOR * HALF_EPS[half_dtype(case)]
    exact = set(case.get("exact", []))
    names = [f.split(".", 2)[2][:-4] for f in ref_files]
    worst, ok = 0.0, True
    for name, g, r in zip(names, got, refs):
        if tuple(g.shape) != tuple(r.shape):
            return f"mismatch: output shape {list(g.shape)}, reference {list(r.shape)}", None
        if r.size == 0:
            continue
        if r.dtype.kind in "USO" or g.dtype.kind in "USO":
            if not np.array_equal(g.astype(str), r.astype(str)):
                return f"mismatch: output {name}: strings differ", None
            continue
        if r.dtype.kind in "iub" or name in exact:
            if not np.array_equal(g, r, equal_nan=r.dtype.kind == "f"):
                ok = False
        gd, rd = g.astype(np.float64), r.astype(np.float64)
        err = float(np.max(np.abs(gd - rd)))
        worst = max(worst, err)
        if not (err <= atol + rtol * float(np.max(np.abs(rd)))) or np.isnan(gd).any() != np.isnan(rd).any():
            ok = False
    return ("match" if ok else "mismatch"), worst


def first_error(text):
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "error" in ln.lower() or "unsupported" in ln.lower() or "panic" in ln.lower():
            return ln[:600]
    return (lines[-1] if lines else "no output")[:600]


TIMES = re.compile(r"lowered in (\S+), compiled in (\S+), executed in (\S+)")


def input_names(xserve, case):
    """The model's input names in order (from `xserve inspect`): a .pt2
    names its inputs after forward's parameters (x, args_0, ...), not after
    the reference files; those are matched by position. Also records the
    inputs' dim symbols in case["symbols"]."""
    names = [f.split(".", 2)[2][:-4] for f in case["in_files"]]
    p = subprocess.run([xserve, "inspect", case["model_file"]], capture_output=True, text=True, timeout=120)
    sigs = re.findall(r"^input\s+(\S+): \w+\[([^\]]*)\]", p.stdout, re.M)
    case["symbols"] = {}
    for (_, dims), f in zip(sigs, case["in_files"]):
        shape = np.load(os.path.join(case["dir"], f), mmap_mode="r").shape
        for d, size in zip(dims.split(","), shape):
            if d and not d.isdigit():
                case["symbols"][d] = int(size)
    got = [n for n, _ in sigs]
    if case["model_file"].endswith(".pt2") and len(got) == len(names):
        return got
    return names


def run_case(xserve, case, timeout):
    out = tempfile.mkdtemp(prefix="xrun")
    args = [xserve, "run", case["model_file"], "--output", out]
    case["input_names"] = input_names(xserve, case)
    for name, f in zip(case["input_names"], case["in_files"]):
        args += ["--input", f"{name}={os.path.join(case['dir'], f)}"]
    t0 = time.time()
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        shutil.rmtree(out, ignore_errors=True)
        return {"result": f"timeout after {timeout}s", "wall": timeout}
    wall = time.time() - t0
    r = {"wall": round(wall, 2)}
    m = TIMES.search(p.stderr)
    if m:
        r["lower"], r["compile"], r["execute"] = m.groups()
    if p.returncode != 0:
        r["result"] = "error: " + first_error(p.stderr + p.stdout)
        shutil.rmtree(out, ignore_errors=True)
        return r
    files = re.findall(r"-> (\S+\.npy)$", p.stdout, re.M)
    got = [np.load(f) for f in files]
    r["result"], r["max_err"] = compare(case, got)
    shutil.rmtree(out, ignore_errors=True)
    return r


def bound_http_addr(log_path):
    """The HTTP address xserve serve logged once it listened, or None yet."""
    with open(log_path) as f:
        m = re.search(r'msg="listening on [^"]*" addr=(\S+)', f.read())
    return m.group(1) if m else None


def http(method, url, body=None, headers=None, timeout=600):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def infer_request(case, binary, files=None):
    files = files or case["in_files"]
    names = case.get("input_names") or [f.split(".", 2)[2][:-4] for f in files]
    arrays = [(n, np.load(os.path.join(case["dir"], f))) for n, f in zip(names, files)]
    inputs, blobs = [], []
    for name, a in arrays:
        strings = a.dtype.kind in "US"
        t = {"name": name, "datatype": "BYTES" if strings else NP_TO_V2[str(a.dtype)], "shape": list(a.shape)}
        if binary:
            b = bytes_data(a) if strings else np.ascontiguousarray(a).tobytes()
            t["parameters"] = {"binary_data_size": len(b)}
            blobs.append(b)
        else:
            t["data"] = [str(x) for x in a.reshape(-1)] if strings else a.reshape(-1).tolist()
        inputs.append(t)
    req = {"inputs": inputs}
    if binary:
        req["parameters"] = {"binary_data_output": True}
    head = json.dumps(req).encode()
    if not binary:
        return head, {"Content-Type": "application/json"}
    return head + b"".join(blobs), {"Content-Type": "application/octet-stream",
                                    "Inference-Header-Content-Length": str(len(head))}


def bytes_data(a):
    """The binary BYTES encoding: each element's 4-byte little-endian
    length, then its UTF-8 bytes."""
    out = b""
    for x in a.reshape(-1):
        e = str(x).encode()
        out += len(e).to_bytes(4, "little") + e
    return out


def parse_bytes(raw, count):
    out, off = [], 0
    for _ in range(count):
        n = int.from_bytes(raw[off:off + 4], "little")
        out.append(raw[off + 4:off + 4 + n].decode())
        off += 4 + n
    return np.array(out, dtype=str)


def parse_response(headers, body):
    hl = {k.lower(): v for k, v in headers.items()}.get("inference-header-content-length")
    if hl is None:
        doc, rest = json.loads(body), b""
    else:
        doc, rest = json.loads(body[:int(hl)]), body[int(hl):]
    outs, off = [], 0
    for o in doc["outputs"]:
        size = (o.get("parameters") or {}).get("binary_data_size")
        if o["datatype"] == "BYTES":
            count = int(np.prod(o["shape"]))
            if size is not None:
                a = parse_bytes(rest[off:off + size], count).reshape(o["shape"])
                off += size
            else:
                a = np.array(o["data"], dtype=str).reshape(o["shape"])
            outs.append(a)
            continue
        dt = np.dtype(V2_TO_NP[o["datatype"]])
        if size is not None:
            a = np.frombuffer(rest[off:off + size], dtype=dt).reshape(o["shape"])
            off += size
        else:
            a = np.array(o["data"], dtype=dt).reshape(o["shape"])
        outs.append(a)
    return outs


def serve_cases(xserve, cases, timeout, log):
    repo = tempfile.mkdtemp(prefix="repo", dir=os.path.dirname(os.path.dirname(os.path.abspath(cases[0]["dir"]))))
    names = {}
    for c in cases:
        # No config.yaml: the zero-config buckets, pad probe and exact-size
        # compiles serve every size (docs/BUCKETS.md).
        name = c["id"].replace("+", "_")
        os.makedirs(os.path.join(repo, name, "1"))
        dst = os.path.join(repo, name, "1", os.path.basename(c["model_file"]))
        try:
            os.link(c["model_file"], dst)  # the repository refuses symlinks that leave it
        except OSError:
            shutil.copy(c["model_file"], dst)
        names[c["id"]] = name
    # Port 0: the server picks its port and logs it, so no other process can
    # take it between choosing and binding.
    log_path = os.path.join(repo, "serve.log")
    logf = open(log_path, "w")
    proc = subprocess.Popen([xserve, "serve", "--model-repo", repo, "--http-addr", "127.0.0.1:0", "--grpc-addr", "",
                             "--nats=false", "--model-control-mode", "none", "--compile-cache", ""],
                            stdout=logf, stderr=subprocess.STDOUT)
    base = None
    results = {}
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            addr = bound_http_addr(log_path)
            if addr:
                base = f"http://{addr}"
            try:
                if base is None:
                    raise OSError("not listening yet")
                if http("GET", base + "/v2/health/live", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"xserve serve exited with {proc.returncode}")
            time.sleep(0.5)
        else:
            raise RuntimeError(f"xserve serve not live after 600s (log: {log_path})")
        for k, c in enumerate(cases):
            name = names[c["id"]]
            binary = k % 2 == 0
            r = {"protocol": "binary" if binary else "json"}
            t0 = time.time()
            try:
                body, headers = infer_request(c, binary)
                status, rh, rb = http("POST", f"{base}/v2/models/{name}/infer", body, headers, timeout=timeout)
                r["wall"] = round(time.time() - t0, 2)
                if status != 200:
                    try:
                        msg = json.loads(rb).get("error", rb.decode(errors="replace"))
                    except ValueError:
                        msg = rb.decode(errors="replace")
                    r["result"] = f"HTTP {status}: {' '.join(str(msg).split())[:600]}"
                else:
                    r["result"], r["max_err"] = compare(c, parse_response(rh, rb))
            except Exception as e:  # recorded per case
                r["result"] = f"error: {type(e).__name__}: {e}"[:600]
            if c["big_files"]:
                r["big"] = serve_one(base, name, c, not binary, timeout, c["big_files"], c["bigref_files"])
            results[c["id"]] = r
            log(f"  serve {c['id']}: {r['result']} {r.get('max_err', '')} ({r.get('wall')}s)"
                + (f"; above 64: {r['big']['result']} {r['big'].get('max_err', '')} at {r['big']['shape']}" if "big" in r else ""))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        logf.close()
        shutil.rmtree(repo, ignore_errors=True)
    return results


def serve_one(base, name, c, binary, timeout, in_files, ref_files):
    """One more request of case c (inputs in_files, references ref_files)."""
    r = {"protocol": "binary" if binary else "json",
         "shape": " ".join(str(list(np.load(os.path.join(c["dir"], f), mmap_mode="r").shape)) for f in in_files)}
    t0 = time.time()
    try:
        body, headers = infer_request(c, binary, in_files)
        status, rh, rb = http("POST", f"{base}/v2/models/{name}/infer", body, headers, timeout=timeout)
        r["wall"] = round(time.time() - t0, 2)
        if status != 200:
            r["result"] = f"HTTP {status}: {' '.join(rb.decode(errors='replace').split())[:600]}"
        else:
            r["result"], r["max_err"] = compare(c, parse_response(rh, rb), ref_files)
    except Exception as e:  # recorded per case
        r["result"] = f"error: {type(e).__name__}: {e}"[:600]
    return r


def status_of(r):
    res = r.get("result", "")
    if res == "match":
        return "match"
    if res.startswith("mismatch"):
        return "mismatch"
    return "error"


def fmt_err(r):
    if r.get("max_err") is None:
        return ""
    return f"{r['max_err']:.2e}"


def write_doc(path, cases, runs, serves, cmdline):
    ok_run = sum(1 for c in cases if status_of(runs.get(c["id"], {})) == "match")
    ok_serve = sum(1 for c in cases if status_of(serves.get(c["id"], {})) == "match")
    exported = [c for c in cases if c.get("model_file")]
    lines = ["# Real third-party models", "",
             "Generated by `make realmodels` (python/realmodels/generate.py exports or downloads the models into",
             "`.cache/realmodels/`, python/realmodels/check.py runs them and writes this page). References: torch",
             "eager for .pt2, ONNX Runtime for .onnx, at a batch (and sequence length) other than the export",
             "example's. `run` is `bin/xserve run`, `serve` one request per model to a real `xserve serve`",
             "over HTTP (KServe v2; binary or JSON tensors as the column says) with **no config.yaml** (the",
             "zero-config buckets, pad probe and exact-size compiles of docs/BUCKETS.md), and a second request",
             "with every non-batch symbol above 64 (80 for the exported models) where the model's export allows",
             "it, against the reference framework's outputs at that size. Tolerance: 1e-3 + 1e-3 * max|ref|",
             "(dynamically quantized models 1e-5 + 1e-5 * max|ref|, statically quantized (QDQ) 3e-2 relative;",
             "float16/bfloat16 models 16 * the dtype's epsilon, both absolute and relative). Times are",
             "`xserve run`'s: lower / compile / execute, and the whole process",
             "(import included).", "",
             f"Command: `{cmdline}`", "",
             f"**{len(cases)} cases, {len(exported)} exported; `xserve run` matches {ok_run}, `xserve serve` matches {ok_serve}.**",
             "", "| case | source | format | opsets | run | serve | serve, non-batch sizes above 64 | lower / compile / execute (wall) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cell(r, proto=False):
        s = status_of(r) if r else "—"
        res = r.get("result", "") if r else ""
        if s == "match":
            txt = f"match ({fmt_err(r)})"
        elif s == "mismatch":
            txt = f"**mismatch** max err {fmt_err(r)}" + ("" if res == "mismatch" else f": {res}")
        elif r:
            txt = "**" + res.replace("|", "\\|")[:180] + ("…" if len(res) > 180 else "") + "**"
        else:
            txt = "—"
        if proto and r:
            txt += f" [{r['protocol']}]"
        return txt

    for c in cases:
        opsets = ", ".join(f"{k} {v}" for k, v in (c.get("opsets") or {}).items())
        if not c.get("model_file"):
            lines.append(f"| {c['id']} | {c.get('source', '')} | {c['format']} | | **not exported: "
                         f"{c.get('export_error', '').replace('|', chr(92) + '|')[:300]}** | | | |")
            continue
        r, s = runs.get(c["id"], {}), serves.get(c["id"])
        t = " / ".join(r.get(k, "?") for k in ("lower", "compile", "execute")) if "lower" in r else ""
        t += f" ({r.get('wall', '?')}s)"
        big = (s or {}).get("big")
        bigcell = (cell(big, True) + f" {big['shape']}") if big else "— (no non-batch symbol above 64)"
        lines.append(f"| {c['id']} | {c.get('source', '')} | {c['format']} | {opsets} | {cell(r)} | {cell(s, True)} | {bigcell} | {t} |")

    # Failures by cause.
    causes = {}
    for c in cases:
        if not c.get("model_file"):
            causes.setdefault("export failed (the exporter, not xserve)", []).append(c["id"])
            continue
        r = runs.get(c["id"], {})
        if status_of(r) == "match":
            continue
        causes.setdefault(classify(r.get("result", "")), []).append(c["id"])
    lines += ["", "## Failures by cause (`xserve run`; `xserve serve` fails the same cases the same way)", ""]
    for cause, ids in sorted(causes.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- **{cause}** ({len(ids)}): {', '.join(ids)}")
    if not causes:
        lines.append("None: every case matches.")
    lines += ["", "## Notes", "",
              "- Dynamically quantized models compute ONNX Runtime's own quantization, so one value a quantization",
              "  step off fails them; statically quantized (QDQ) models get 3e-2 relative: ONNX Runtime runs a QDQ",
              "  Conv in float and a value next to an int8 rounding tie lands on the adjacent step",
              "  (docs/QUANTIZATION.md).",
              "- silero-vad v5/v6 (and the wheel's silero_vad.onnx, the same graph) branch on their sr input",
              "  (If sr == 16000, a run-time condition); at 512 samples the 8 kHz branch cannot be built (its LSTM",
              "  would get a rank-5 input), so the program holds the 16 kHz branch and a guard: 8 kHz input at these",
              "  sizes fails naming the If and the LSTM, as it fails in ONNX Runtime (docs/DATA-DEPENDENT.md).",
              "- `xserve inspect --unsupported MODEL` lists every unsupported op of a model at once."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def classify(res):
    """A short cause for a failed run: the unsupported op or the error kind."""
    if res.startswith("mismatch"):
        return "wrong result"
    if res.startswith("timeout"):
        return "timeout"
    m = re.search(r"calls (aten\.\S+), which neither", res)
    if m:
        return f"unsupported ATen op {m.group(1)} (non-decomposed .pt2; importer/fx)"
    m = re.search(r"operator (\S+) \(node", res)
    if m:
        return f"unsupported ONNX op {m.group(1)} (quantized ONNX needs QuantizeLinear/DequantizeLinear/DynamicQuantizeLinear)" \
            if "uantize" in m.group(1) else f"unsupported ONNX op {m.group(1)}"
    if "in-place" in res:
        return "in-place op writing a view that is read later (.pt2 not functionalized; importer/fx)"
    if "rebuild for" in res:
        tail = res.rsplit("): ", 1)[-1]
        return "deferred import fails at concrete sizes too: " + re.sub(r"\(operator.*", "", tail.replace("onnx: unsupported: ", ""))[:120]
    if "If with a run-time condition" in res:
        return "run-time If whose branches differ in shape"
    if "symbolic" in res or "computed from graph inputs" in res:
        return "shape computed from symbolic sizes: " + res.split(": ")[-1][:120]
    return res[:160]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=".cache/realmodels/cases")
    ap.add_argument("--xserve", default="bin/xserve")
    ap.add_argument("--only", default="", help="comma-separated substrings of case ids")
    ap.add_argument("--doc", default="docs/real-models.md")
    ap.add_argument("--results", default=".cache/realmodels/results.json", help="merged with earlier results")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--command", default="make realmodels", help="how the results were made, for the page")
    ap.add_argument("--no-serve", action="store_true", help="skip the xserve serve stage")
    ap.add_argument("--no-run", action="store_true", help="skip the xserve run stage (keep earlier results)")
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s]
    cases = [load_case(os.path.join(args.cases, d)) for d in sorted(os.listdir(args.cases))
             if os.path.exists(os.path.join(args.cases, d, "case.json"))]
    todo = [c for c in cases if c["model_file"] and (not only or any(s in c["id"] for s in only))]
    prev = {}
    if os.path.exists(args.results):
        with open(args.results) as f:
            prev = json.load(f)
    runs, serves = prev.get("run", {}), prev.get("serve", {})

    def log(msg):
        print(msg, flush=True)

    def save():
        with open(args.results, "w") as f:
            json.dump({"run": runs, "serve": serves}, f, indent=1)
        write_doc(args.doc, cases, runs, serves, args.command)

    for c in todo:
        if args.no_run:
            c["input_names"] = input_names(args.xserve, c)
            continue
        runs[c["id"]] = run_case(args.xserve, c, args.timeout)
        r = runs[c["id"]]
        log(f"run {c['id']}: {r['result']} {r.get('max_err', '')} ({r.get('wall')}s)")
        save()
    if not args.no_serve and todo:
        serves.update(serve_cases(args.xserve, todo, args.timeout, log))
    save()
    stage = serves if args.no_run else runs
    bad = [c["id"] for c in todo if status_of(stage.get(c["id"], {})) != "match"]
    print(f"{'serve' if args.no_run else 'run'}: {len(todo) - len(bad)} passed, {len(bad)} failed")


if __name__ == "__main__":
    main()
