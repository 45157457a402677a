"""Exports the xserve model zoo: each model to ONNX (torch.onnx.export) and to
a torch.export archive (.pt2), with reference inputs and PyTorch eager
outputs for two batch sizes, and a manifest.json per model that
harness/zoo (go run ./cmd/zoo-check) reads.

    .venv-zoo/bin/python python/zoo/export.py --out zoo                   # full size (make zoo)
    .venv-zoo/bin/python python/zoo/export.py --out testdata/zoo --small  # fixtures (make zoo-fixtures)
    .venv-zoo/bin/python python/zoo/export.py --out zoo --models resnet18,bert

Weights are random from a fixed seed (torch.manual_seed), so the same
command with the same pinned packages (python/requirements-zoo.txt) writes
the same models and reference data. Layout of OUT/<model>/:

    manifest.json            what is below, plus versions, exporters, timings
    model.onnx[.data]        torch.onnx.export(dynamo=True), opset 18; TorchScript
                             exporter (dynamo=False) only if dynamo fails
    model.pt2                torch.export.export(...).run_decompositions()
    b<N>.in.<input>.npy      reference inputs for batch size N
    b<N>.out.<output>.npy    PyTorch eager outputs for those inputs

The ONNX file is also run with ONNX Runtime and the .pt2 program with
ExportedProgram.module(); their max abs error against eager is recorded in
the manifest, so that an exporter bug is not mistaken for an xserve bug.
"""

import argparse
import json
import os
import shutil
import sys
import time
import traceback

import numpy as np
import torch
from torch.export import Dim

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models  # noqa: E402

MANIFEST_VERSION = 1


def versions():
    out = {"torch": torch.__version__, "python": sys.version.split()[0], "numpy": np.__version__}
    for mod in ("torchvision", "onnx", "onnxscript", "onnxruntime"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # recorded, never fatal
            out[mod] = f"unavailable: {e}"
    return out


def short_error(e, limit=4000):
    s = f"{type(e).__name__}: {e}"
    return s if len(s) <= limit else s[:limit] + " ..."


def dynamic_shapes(spec):
    dims = {name: Dim(name, min=lo, max=hi) for name, (lo, hi, _) in spec.dims.items()}
    return {inp.name: {i: dims[d] for i, d in enumerate(inp.shape) if isinstance(d, str)} for inp in spec.inputs}


def dynamic_axes(spec):
    return {inp.name: {i: d for i, d in enumerate(inp.shape) if isinstance(d, str)} for inp in spec.inputs}


def max_abs_errors(got, want):
    return [float(np.max(np.abs(np.asarray(g, dtype=np.float64) - np.asarray(w, dtype=np.float64)))) if w.size else 0.0
            for g, w in zip(got, want)]


def to_numpy(outs):
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    return [o.detach().cpu().numpy() for o in outs]


def onnx_value_shapes(values):
    out = []
    for v in values:
        dims = []
        for d in v.type.tensor_type.shape.dim:
            dims.append(d.dim_param if d.HasField("dim_param") else int(d.dim_value))
        out.append({"name": v.name, "shape": dims})
    return out


def export_onnx(spec, example, path, opset, external_data, log):
    """torch.onnx.export with the dynamo exporter, falling back to the
    TorchScript exporter. Returns the manifest entry."""
    entry = {"file": os.path.basename(path)}
    names = [i.name for i in spec.inputs]
    t = time.time()
    try:
        torch.onnx.export(spec.module, tuple(example), path, dynamo=True, opset_version=opset,
                          input_names=names, output_names=spec.outputs,
                          dynamic_shapes=dynamic_shapes(spec), external_data=external_data)
        entry["exporter"] = f"torch.onnx.export(dynamo=True, opset_version={opset})"
    except Exception as e:
        entry["dynamo_error"] = short_error(e)
        log(f"  onnx: dynamo exporter failed ({short_error(e, 300)}); trying dynamo=False")
        for f in os.listdir(os.path.dirname(path)):
            if f.startswith(os.path.basename(path)):
                os.remove(os.path.join(os.path.dirname(path), f))
        t = time.time()
        torch.onnx.export(spec.module, tuple(example), path, dynamo=False, opset_version=opset,
                          input_names=names, output_names=spec.outputs, dynamic_axes=dynamic_axes(spec))
        entry["exporter"] = f"torch.onnx.export(dynamo=False, opset_version={opset})"
    entry["export_seconds"] = round(time.time() - t, 2)
    import onnx
    m = onnx.load(path, load_external_data=False)
    entry["files"] = sorted(f for f in os.listdir(os.path.dirname(path)) if f.startswith(os.path.basename(path)))
    entry["opset"] = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    entry["ops"] = sorted({n.op_type if not n.domain else f"{n.domain}.{n.op_type}" for n in m.graph.node})
    entry["inputs"] = onnx_value_shapes(m.graph.input)
    entry["outputs"] = onnx_value_shapes(m.graph.output)
    return entry


def export_pt2(spec, example, path):
    t = time.time()
    ep = torch.export.export(spec.module, tuple(example), dynamic_shapes=dynamic_shapes(spec))
    ep = ep.run_decompositions()
    torch.export.save(ep, path)
    entry = {
        "file": os.path.basename(path), "files": [os.path.basename(path)],
        "exporter": "torch.export.export(...).run_decompositions(); torch.export.save",
        "export_seconds": round(time.time() - t, 2),
        "ops": sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"}),
        "range_constraints": {str(k): str(v) for k, v in ep.range_constraints.items()},
    }
    return entry, ep


def export_model(name, args, log):
    spec = zoo_models.build(name, args.small, args.seed)
    mdir = os.path.join(args.out, name)
    if os.path.isdir(mdir):
        shutil.rmtree(mdir)
    os.makedirs(mdir)
    nparams = sum(p.numel() for p in spec.module.parameters())
    log(f"{name}: {nparams / 1e6:.3f}M parameters ({spec.note})")

    # Reference cases: PyTorch eager on fixed random inputs.
    cases, refs = [], []
    for b in args.batches:
        gen = torch.Generator().manual_seed(args.seed * 1000 + b)
        inputs = spec.make_inputs(b, gen)
        with torch.no_grad():
            outs = to_numpy(spec.module(*inputs))
        if len(outs) != len(spec.outputs):
            raise RuntimeError(f"{name}: forward returned {len(outs)} outputs, spec names {len(spec.outputs)}")
        case = {"batch": b, "dims": {"batch": b, **spec.case_dims.get(b, {})}, "inputs": [], "outputs": []}
        for inp, t in zip(spec.inputs, inputs):
            f = f"b{b}.in.{inp.name}.npy"
            np.save(os.path.join(mdir, f), t.numpy())
            case["inputs"].append({"name": inp.name, "file": f, "dtype": str(t.numpy().dtype), "shape": list(t.shape)})
        for oname, o in zip(spec.outputs, outs):
            f = f"b{b}.out.{oname}.npy"
            np.save(os.path.join(mdir, f), o)
            case["outputs"].append({"name": oname, "file": f, "dtype": str(o.dtype), "shape": list(o.shape),
                                    "max_abs": float(np.max(np.abs(o))) if o.size else 0.0})
        cases.append(case)
        refs.append((inputs, outs))

    example = spec.make_inputs(spec.dims["batch"][2], torch.Generator().manual_seed(args.seed * 1000 + 999))
    formats = {}

    if "onnx" in args.formats:
        path = os.path.join(mdir, "model.onnx")
        try:
            entry = export_onnx(spec, example, path, args.opset, not args.small, log)
            try:
                import onnxruntime as ort
                sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                errs = []
                for inputs, want in refs:
                    got = sess.run(None, {i.name: t.numpy() for i, t in zip(spec.inputs, inputs)})
                    errs.append(max(max_abs_errors(got, want)))
                entry["onnxruntime_max_abs_error"] = errs
            except Exception as e:
                entry["onnxruntime_error"] = short_error(e)
            log(f"  onnx: {entry['exporter']} in {entry['export_seconds']}s, "
                f"onnxruntime max abs error {entry.get('onnxruntime_max_abs_error', entry.get('onnxruntime_error'))}")
        except Exception as e:
            entry = {"file": "model.onnx", "error": short_error(e)}
            log(f"  onnx: export failed: {short_error(e, 500)}")
            traceback.print_exc()
        formats["onnx"] = entry

    if "pt2" in args.formats:
        path = os.path.join(mdir, "model.pt2")
        try:
            entry, ep = export_pt2(spec, example, path)
            try:
                mod = ep.module()
                errs = []
                with torch.no_grad():
                    for inputs, want in refs:
                        errs.append(max(max_abs_errors(to_numpy(mod(*inputs)), want)))
                entry["exported_program_max_abs_error"] = errs
            except Exception as e:
                entry["exported_program_error"] = short_error(e)
            log(f"  pt2: exported in {entry['export_seconds']}s, ExportedProgram max abs error "
                f"{entry.get('exported_program_max_abs_error', entry.get('exported_program_error'))}")
        except Exception as e:
            entry = {"file": "model.pt2", "error": short_error(e)}
            log(f"  pt2: export failed: {short_error(e, 500)}")
            traceback.print_exc()
        formats["pt2"] = entry

    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "model": name,
        "variant": "small" if args.small else "full",
        "note": spec.note,
        "seed": args.seed,
        "parameters": nparams,
        "versions": versions(),
        "dims": {k: {"min": lo, "max": hi} for k, (lo, hi, _) in spec.dims.items()},
        "inputs": [{"name": i.name, "dtype": str(i.dtype).removeprefix("torch."), "shape": i.shape} for i in spec.inputs],
        "outputs": [{"name": o} for o in spec.outputs],
        "formats": formats,
        "cases": cases,
    }
    with open(os.path.join(mdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    size = dir_size(mdir)
    log(f"  wrote {mdir} ({size / 1e6:.2f} MB)")
    return size


def dir_size(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="zoo", help="output directory (default zoo)")
    ap.add_argument("--models", default=",".join(zoo_models.MODELS),
                    help="comma-separated models (default all: %(default)s)")
    ap.add_argument("--small", action="store_true", help="reduced variants for the committed fixtures")
    ap.add_argument("--formats", default="onnx,pt2", help="comma-separated: onnx, pt2")
    ap.add_argument("--batches", default="1,3", help="batch sizes of the reference cases")
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-mb", type=float, default=0, help="fail if OUT is larger than this many MB (0: no limit)")
    ap.add_argument("--skip-existing", action="store_true",
                    help="leave a model whose OUT/<model>/manifest.json exists as it is")
    args = ap.parse_args()
    args.formats = [f for f in args.formats.split(",") if f]
    args.batches = [int(b) for b in args.batches.split(",") if b]
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in zoo_models.BUILDERS:
            ap.error(f"unknown model {m!r} (known: {', '.join(zoo_models.MODELS)})")
    os.makedirs(args.out, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    log(f"exporting {len(models)} models ({'small' if args.small else 'full'}) to {args.out}: {versions()}")
    failed = []
    for m in models:
        if args.skip_existing and os.path.exists(os.path.join(args.out, m, "manifest.json")):
            log(f"{m}: exported already, kept")
            continue
        t = time.time()
        try:
            export_model(m, args, log)
        except Exception as e:
            failed.append(m)
            log(f"{m}: FAILED: {short_error(e, 1000)}")
            traceback.print_exc()
        log(f"  {m} took {time.time() - t:.1f}s")
    total = dir_size(args.out)
    log(f"total size of {args.out}: {total / 1e6:.2f} MB")
    if failed:
        log(f"failed: {', '.join(failed)}")
        sys.exit(1)
    if args.max_mb and total > args.max_mb * 1e6:
        log(f"error: {args.out} is {total / 1e6:.2f} MB, over the limit of {args.max_mb} MB")
        sys.exit(1)


if __name__ == "__main__":
    main()
