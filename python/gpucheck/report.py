"""report.json and report.md of the GPU check (format: docs/GPU.md#the-report)."""

import json
import os

SYSTEM_HEADS = {
    "xserve_http": "xserve HTTP binary",
    "xserve_grpc": "xserve gRPC",
    "torch_eager": "torch eager",
    "torch_compile": "torch.compile",
    "jax_jit": "JAX jit",
}


def write(r, out):
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(r, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(markdown(r))


def _f(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) < 1e-3 or abs(v) >= 1e5:
            return f"{v:.2e}"
        return f"{v:.{digits}g}"
    return str(v)


def markdown(r):
    h, p, x = r["host"], r["plugin"], r["xserve"]
    lines = [
        f"# xserve GPU check: {'INCOMPLETE' if r.get('incomplete') else 'PASS' if r.get('ok') else 'FAIL'} ({r['mode']})",
        "",
        f"Started {r['started']}, took {r.get('duration_s')} s.",
        "",
        "| | |",
        "|---|---|",
        f"| host | {h.get('machine')}, {h.get('cpus')} CPUs, {h.get('glibc')}, Python {h.get('python')} |",
        f"| device | {h.get('gpu') or 'CPU'} {('; ' + '; '.join(h['nvidia_smi'])) if h.get('nvidia_smi') else ''} |",
        f"| torch | {h.get('torch')} (CUDA {h.get('torch_cuda')}), torchvision {h.get('torchvision')} |",
        f"| JAX | {h.get('jax', '-')} on {h.get('jax_device', '-')} |",
        f"| xserve | {x.get('source', '')} {x.get('binary', '')}"
        + (f", bundle of {x['bundle'].get('commit', '?')[:12]} (needs {x['bundle'].get('glibc_required', '?')})" if x.get("bundle") else "")
        + " |",
        f"| PJRT plugin | {p.get('path', '-')} ({p.get('found_by', '-')}) |",
        f"| plugin versions | PJRT C API {p.get('pjrt_c_api', '-')}, StableHLO {p.get('stablehlo_current_version', '-')} "
        f"(minimum {p.get('stablehlo_minimum_version', '-')}), xla_version {p.get('xla_version', '-')} |",
        f"| client | {p.get('client', '-')} |",
        "",
        "## Outputs against PyTorch",
        "",
        f"Each output against torch in float64 on the CPU; tolerance: {r['tolerance']['factor']:g} x torch's own "
        f"largest error on the device (float32, TF32 off and on), at least {r['tolerance']['floor']:g} x the largest "
        "reference magnitude (docs/GPU.md#tolerance).",
        "",
        "| model | format | path | batch | max abs err | rel err | tolerance | torch err | top-1 agree | ok |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in r["correctness"]:
        if "error" in c or "max_abs" not in c:
            note = c.get("error", c.get("checked", ""))
            lines.append(f"| {c['model']} | {c['format']} | {c['path']} | {c.get('batch', '-')} | {note.splitlines()[0][:160] if note else ''} | | | | | {'yes' if c['ok'] else '**NO**'} |")
            continue
        lines.append(f"| {c['model']} | {c['format']} | {c['path']} | {c['batch']} | {_f(c['max_abs'])} | {_f(c['rel'])} | "
                     f"{_f(c['tolerance'])} | {_f(c['torch_max_abs'])} | {_f(c['top1_agree'])} | {'yes' if c['ok'] else '**NO**'} |")
    lines += ["", "## Latency and throughput", "",
              "One request (or call) at a time, host tensors in and out; p50 (p99) in ms and rows/s, the median of "
              f"{r['profile']['rounds']} interleaved rounds. Served: the model's .pt2 through `xserve serve`, driven by "
              f"cmd/loadtest; in process: the same weights in torch eager, torch.compile (backend {r['profile'].get('compile_backend')}, default dynamic=None) and JAX jit.", ""]
    systems = list(SYSTEM_HEADS)
    lines.append("| model | batch | " + " | ".join(SYSTEM_HEADS[s] for s in systems) + " |")
    lines.append("|---|---|" + "---|" * len(systems))
    cells = {(c["model"], c["batch"], c["system"]): c for c in r["latency"]}
    for m, b in sorted({(c["model"], c["batch"]) for c in r["latency"]}, key=lambda k: (["cnn", "bert", "vit"].index(k[0]) if k[0] in ("cnn", "bert", "vit") else 9, k[1])):
        row = []
        for s in systems:
            c = cells.get((m, b, s))
            if c is None or "p50_ms" not in c:
                row.append("error" if c and "error" in c else "-")
            else:
                row.append(f"{_f(c['p50_ms'])} ({_f(c['p99_ms'])}) · {_f(c['rows_per_s'], 4)}/s")
        lines.append(f"| {m} | {b} | " + " | ".join(row) + " |")
    lines += ["", "## Dynamic batching (cnn, batch-1 requests, HTTP binary)", "",
              "| concurrency | batching | requests/s | p50 ms | p99 ms |", "|---|---|---|---|---|"]
    for c in sorted(r["batching"], key=lambda c: (c["concurrency"], c["batching"])):
        lines.append(f"| {c['concurrency']} | {c['batching']} | {_f(c['requests_per_s'], 4)} | {_f(c['p50_ms'])} | {_f(c['p99_ms'])} |")
    lines += ["", "## Targets", "", "| target | value | limit | met |", "|---|---|---|---|"]
    for t in r["targets"]:
        lines.append(f"| {t['target']} | {t['value']} | {t['limit']} | {'yes' if t['met'] else 'no'} |")
    if r["mode"] != "gpu":
        lines += ["", "The targets are the GPU's: a CPU dry run shows that they are computed, not that they are met."]
    lines += ["", "## Steps", "", "| step | ok | seconds |", "|---|---|---|"]
    for name, s in r["steps"].items():
        lines.append(f"| {name} | {'yes' if s['ok'] else '**NO**'} | {s['seconds']} |")
    if r["skipped"]:
        lines += ["", "## Skipped", ""] + [f"- {s['what']}: {s['why']}" for s in r["skipped"]]
    if r["errors"]:
        lines += ["", "## Errors", ""]
        for e in r["errors"]:
            lines.append(f"- **{e['where']}**: {e['error'].splitlines()[0][:400] if e['error'] else ''}")
    errs = [c for c in r["latency"] if "error" in c]
    if errs:
        lines += ["", "Not measured: " + "; ".join(f"{c['model']} b{c['batch']} {c['system']}: {c['error'][:200]}" for c in errs)]
    return "\n".join(lines) + "\n"
