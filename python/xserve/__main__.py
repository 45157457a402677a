"""python -m xserve: export a model (or a Hugging Face causal LM) into a repository, or run one inference.

    python -m xserve export pkg.module:build --repo models --name mlp \\
        --input input=2,8 --dim input.0=batch:1:64 --buckets batch=1,2,4,8 \\
        [--format onnx] [--check-url http://127.0.0.1:8080]
    python -m xserve export-causal-lm HF_DIR --repo models --name tiny-llama \\
        [--format onnx] [--max-seq-len 512] [--slots 8]
    python -m xserve export-seq2seq HF_DIR --repo models --name tiny-t5 \
        [--max-seq-len 256] [--max-source-len 512] [--slots 8]
    python -m xserve infer --url http://127.0.0.1:8080 --model tinycnn \\
        --input image=image.npy [--output DIR]

``build`` is called with no arguments and returns the torch.nn.Module.
Example inputs are random normal floats (``name=2,8`` or ``name=2,8:float32``)
or integers in [0, 2) for integer dtypes, or an .npy file (``name=x.npy``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, Sequence

import numpy as np


def _example(spec: str) -> tuple[str, Any]:
    import torch

    name, _, value = spec.partition("=")
    if not name or not value:
        raise SystemExit(f"--input {spec!r}: want NAME=SHAPE[:DTYPE] or NAME=FILE.npy")
    if value.endswith(".npy"):
        return name, torch.from_numpy(np.load(value))
    shape_text, _, dtype_text = value.partition(":")
    shape = [int(s) for s in shape_text.split(",") if s]
    dtype = getattr(torch, dtype_text or "float32")
    if dtype.is_floating_point:
        return name, torch.randn(*shape, dtype=dtype)
    return name, torch.randint(0, 2, shape, dtype=dtype)


def _dims(specs: Sequence[str]) -> dict[str, dict[int, Any]]:
    from torch.export import Dim

    out: dict[str, dict[int, Any]] = {}
    made: dict[str, Any] = {}
    for spec in specs:
        where, _, what = spec.partition("=")
        inp, _, idx = where.rpartition(".")
        parts = what.split(":")
        if not inp or not idx.isdigit() or not parts[0]:
            raise SystemExit(f"--dim {spec!r}: want INPUT.AXIS=NAME[:MIN:MAX]")
        sym = parts[0]
        if sym not in made:
            kw = {}
            if len(parts) > 1 and parts[1]:
                kw["min"] = int(parts[1])
            if len(parts) > 2 and parts[2]:
                kw["max"] = int(parts[2])
            made[sym] = Dim(sym, **kw)
        out.setdefault(inp, {})[int(idx)] = made[sym]
    return out


def _export(a: argparse.Namespace) -> int:
    import torch

    from .export_ import export

    mod_name, _, fn_name = a.factory.partition(":")
    sys.path.insert(0, os.getcwd())
    factory = getattr(importlib.import_module(mod_name), fn_name or "build")
    model = factory()
    torch.manual_seed(a.seed)
    examples = [_example(s) for s in a.input]
    buckets = {}
    for b in a.buckets:
        sym, _, sizes = b.partition("=")
        buckets[sym] = [int(s) for s in sizes.split(",") if s]
    # dynamic_shapes by position, in the order of --input.
    dims = _dims(a.dim)
    unknown = set(dims) - {n for n, _ in examples}
    if unknown:
        raise SystemExit(f"--dim names inputs {sorted(unknown)} that no --input gives")
    shapes = [dims.get(n) for n, _ in examples] if dims else None
    r = export(model, tuple(t for _, t in examples), repo=a.repo, name=a.name, dynamic_shapes=shapes,
               buckets=buckets or None, format=a.format, check_url=a.check_url)
    print(f"wrote {r.name} version {r.version}: {r.path} and {r.config_path}")
    print(f"inputs {r.inputs}, outputs {r.outputs}, buckets {r.config.get('buckets', {})}")
    if r.max_abs_error is not None:
        print(f"checked against {a.check_url}: max abs error {r.max_abs_error:.3g}")
    return 0


def _export_causal_lm(a: argparse.Namespace) -> int:
    from .causal_lm import export_causal_lm

    buckets = [int(s) for s in a.prefill_buckets.split(",") if s] if a.prefill_buckets else None
    r = export_causal_lm(a.hf_dir, repo=a.repo, name=a.name, format=a.format, max_seq_len=a.max_seq_len, slots=a.slots,
                         prefill_buckets=buckets, dtype=a.dtype)
    print(f"wrote {r.name} version {r.version}: {r.path} and {r.config_path}")
    print(f"generate: {r.config['generate']}; tokenizer files: {', '.join(r.files) or 'none'}")
    return 0


def _export_seq2seq(a: argparse.Namespace) -> int:
    from .seq2seq import export_seq2seq

    def sizes(text: str | None) -> list[int] | None:
        return [int(s) for s in text.split(",") if s] if text else None

    r = export_seq2seq(a.hf_dir, repo=a.repo, name=a.name, max_seq_len=a.max_seq_len, max_source_len=a.max_source_len, slots=a.slots,
                       prefill_buckets=sizes(a.prefill_buckets), encoder_buckets=sizes(a.encoder_buckets), dtype=a.dtype)
    print(f"wrote {r.name} version {r.version}: {r.path}, {r.encoder_path} and {r.config_path}")
    print(f"generate: {r.config['generate']}; tokenizer files: {', '.join(r.files) or 'none'}")
    return 0


def _infer(a: argparse.Namespace) -> int:
    from .client import Client

    inputs = {}
    for spec in a.input:
        name, _, path = spec.partition("=")
        inputs[name] = np.load(path)
    out = Client(a.url, token=a.token or os.environ.get("XSERVE_TOKEN")).infer(a.model, inputs, version=a.version)
    for name, arr in out.items():
        if a.output:
            os.makedirs(a.output, exist_ok=True)
            np.save(os.path.join(a.output, name + ".npy"), arr)
        print(f"{name}: {arr.dtype}{list(arr.shape)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xserve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="torch.export a model into a model repository")
    e.add_argument("factory", help="module:function returning the torch.nn.Module")
    e.add_argument("--repo", default="models")
    e.add_argument("--name")
    e.add_argument("--input", action="append", default=[], required=True, help="NAME=SHAPE[:DTYPE] or NAME=FILE.npy, in forward's order")
    e.add_argument("--dim", action="append", default=[], help="INPUT.AXIS=NAME[:MIN:MAX], a dynamic dim")
    e.add_argument("--buckets", action="append", default=[], help="NAME=SIZE,SIZE,... for a dynamic dim")
    e.add_argument("--format", choices=["pt2", "onnx"], default="pt2")
    e.add_argument("--check-url", help="a server serving --repo: load the model there and compare with eager")
    e.add_argument("--seed", type=int, default=0)
    c = sub.add_parser("export-causal-lm", help="a Hugging Face causal LM (save_pretrained directory) into a generative model")
    c.add_argument("hf_dir", help="the directory save_pretrained wrote (model and tokenizer)")
    c.add_argument("--repo", default="models")
    c.add_argument("--name", help="the model's name (default: the directory's)")
    c.add_argument("--format", choices=["pt2", "onnx"], default="pt2")
    c.add_argument("--max-seq-len", type=int, help="most tokens per sequence (default: the model's positions, at most 2048)")
    c.add_argument("--slots", type=int, default=8, help="most sequences decoded at once")
    c.add_argument("--prefill-buckets", help="prompt lengths compiled, e.g. 16,32,64")
    c.add_argument("--dtype", help="load the weights as this torch dtype (default: as saved)")
    s = sub.add_parser("export-seq2seq", help="a Hugging Face encoder-decoder (T5, BART, Whisper) into a generative model")
    s.add_argument("hf_dir", help="the directory save_pretrained wrote (model and tokenizer)")
    s.add_argument("--repo", default="models")
    s.add_argument("--name", help="the model's name (default: the directory's)")
    s.add_argument("--max-seq-len", type=int, help="most decoder tokens per sequence (default: 256, at most the decoder's positions)")
    s.add_argument("--max-source-len", type=int, help="longest text encoder input (default 512; Whisper's is fixed)")
    s.add_argument("--slots", type=int, default=8, help="most sequences decoded at once")
    s.add_argument("--prefill-buckets", help="decoder prompt lengths compiled, e.g. 4,16")
    s.add_argument("--encoder-buckets", help="text encoder input lengths compiled, e.g. 16,32,64")
    s.add_argument("--dtype", help="load the weights as this torch dtype (default: as saved)")
    i = sub.add_parser("infer", help="one inference over HTTP")
    i.add_argument("--url", default=os.environ.get("XSERVE_URL", "http://127.0.0.1:8080"))
    i.add_argument("--model", required=True)
    i.add_argument("--version")
    i.add_argument("--input", action="append", default=[], required=True, help="NAME=FILE.npy")
    i.add_argument("--output", help="write NAME.npy files here")
    i.add_argument("--token")
    a = p.parse_args(argv)
    if a.cmd == "export":
        return _export(a)
    if a.cmd == "export-causal-lm":
        return _export_causal_lm(a)
    if a.cmd == "export-seq2seq":
        return _export_seq2seq(a)
    return _infer(a)


if __name__ == "__main__":
    sys.exit(main())
