"""xserve.export: torch.export a model into an xserve model repository.

It writes ``<repo>/<name>/<next version>/model.pt2`` (or ``model.onnx``)
atomically (a dot-named temporary directory, then a rename, which the
repository's poller ignores until it is complete) and ``<repo>/<name>/config.yaml``
whose ``inputs: dims`` carry the user's symbol names (torch's ``s0``, ``s17``
are renamed through them, see docs/BUCKETS.md) and whose ``buckets`` lie
within each symbol's range.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any, Mapping, Sequence

import numpy as np

DEFAULT_BUCKET_MAX = 64


@dataclasses.dataclass
class SymbolInfo:
    """A dynamic dimension: its served name, the exporter's name and range."""

    name: str
    model_symbol: str
    min: int
    max: int | None  # None: unbounded
    buckets: list[int]


@dataclasses.dataclass
class Exported:
    """What export wrote."""

    name: str
    version: int
    path: pathlib.Path  # the model file
    config_path: pathlib.Path
    config: dict[str, Any]
    inputs: list[str]
    outputs: list[str]
    symbols: dict[str, SymbolInfo]
    max_abs_error: float | None = None  # set when check_url was given


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        raise ImportError("xserve.export needs torch: pip install 'xserve[torch]'") from e
    return torch


def _arg_names(model: Any, n: int) -> list[str]:
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return [p.name for p in params[:n]]
    except (TypeError, ValueError):
        return []


def _dims_by_position(model: Any, n: int, dynamic_shapes: Any) -> list[dict[int, Any]]:
    """dynamic_shapes (dict by argument name, or a sequence) as one {dim: Dim} per input."""
    if dynamic_shapes is None:
        return [{} for _ in range(n)]
    if isinstance(dynamic_shapes, Mapping):
        names = _arg_names(model, n)
        out = []
        for i in range(n):
            spec = dynamic_shapes.get(names[i]) if i < len(names) else None
            out.append(_as_dim_map(spec))
        return out
    specs = list(dynamic_shapes)
    return [_as_dim_map(specs[i] if i < len(specs) else None) for i in range(n)]


def _as_dim_map(spec: Any) -> dict[int, Any]:
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        return dict(spec)
    return {i: d for i, d in enumerate(spec) if d is not None}


def _next_version(model_dir: pathlib.Path) -> int:
    versions = [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()] if model_dir.exists() else []
    return max(versions, default=0) + 1


def default_buckets(lo: int, hi: int | None) -> list[int]:
    """Powers of two up to 64 clamped to [lo, hi], lo itself first."""
    top = DEFAULT_BUCKET_MAX if hi is None else min(hi, DEFAULT_BUCKET_MAX)
    lo = max(lo, 1)
    sizes = {lo} | {p for p in (1 << k for k in range(7)) if lo <= p <= top}
    if hi is not None and hi < DEFAULT_BUCKET_MAX:
        sizes.add(hi)
    return sorted(s for s in sizes if s <= max(top, lo))


def _finite(bound: Any) -> int | None:
    """A range bound as an int; None for torch's int_oo (or anything unbounded)."""
    try:
        v = int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None
    return v if v < (1 << 62) else None


def _yaml(config: Mapping[str, Any]) -> str:
    """config.yaml text (the small subset export writes: maps, flow lists, scalars)."""
    lines = ["# written by xserve.export"]
    for key, value in config.items():
        if key == "inputs":
            lines.append("inputs:")
            for inp in value:
                lines.append(f"  - name: {json.dumps(inp['name'])}")
                if "dims" in inp:
                    lines.append("    dims: [" + ", ".join(str(d) for d in inp["dims"]) + "]")
        elif isinstance(value, Mapping):
            lines.append(f"{key}:")
            for k, v in value.items():
                text = "[" + ", ".join(str(x) for x in v) + "]" if isinstance(v, list) else json.dumps(v)
                lines.append(f"  {k}: {text}")
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def _symbols(ep: Any, dims_by_input: list[dict[int, Any]], buckets: Mapping[str, Sequence[int]] | None) -> tuple[dict[str, SymbolInfo], list[list[Any] | None]]:
    """The served symbols of ep's inputs, and each input's config dims (None: leave the model's)."""
    torch = _torch()
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    ranges = {str(k): v for k, v in ep.range_constraints.items()}
    symbols: dict[str, SymbolInfo] = {}
    config_dims: list[list[Any] | None] = []
    for i, name in enumerate(ep.graph_signature.user_inputs):
        shape = placeholders[name].meta["val"].shape
        dims: list[Any] = []
        derived = False
        for d, size in enumerate(shape):
            if not isinstance(size, torch.SymInt):
                dims.append(int(size))
                continue
            expr = str(size.node.expr)
            if expr not in ranges:  # a derived dim such as 2*s0: leave the model's names
                derived = True
                break
            user = dims_by_input[i].get(d) if i < len(dims_by_input) else None
            served = getattr(user, "__name__", None) or expr
            r = ranges[expr]
            lo = int(r.lower)
            hi = _finite(r.upper)
            if served not in symbols:
                want = buckets.get(served) if buckets else None
                if want is not None:
                    want = sorted(int(b) for b in want)
                    bad = [b for b in want if b < max(lo, 1) or (hi is not None and b > hi)]
                    if bad:
                        raise ValueError(f"xserve.export: buckets[{served!r}] = {want}: {bad} outside the symbol's range [{lo}, {hi if hi is not None else 'inf'}]")
                symbols[served] = SymbolInfo(served, expr, lo, hi, want or default_buckets(lo, hi))
            dims.append(served)
        config_dims.append(None if derived else dims)
    if buckets:
        unknown = sorted(set(buckets) - set(symbols))
        if unknown:
            raise ValueError(f"xserve.export: buckets for {unknown}, which are not dynamic dims of the model (symbols: {sorted(symbols)})")
    return symbols, config_dims


def export(
    model: Any,
    example_inputs: Any,
    repo: str | os.PathLike[str] = "models",
    name: str | None = None,
    dynamic_shapes: Any = None,
    buckets: Mapping[str, Sequence[int]] | None = None,
    format: str = "pt2",
    check_url: str | None = None,
    *,
    config: Mapping[str, Any] | None = None,
    strict: bool = False,
    opset: int = 18,
    atol: float = 1e-4,
    rtol: float = 1e-4,
) -> Exported:
    """torch.export ``model`` on ``example_inputs`` into model repository ``repo``.

    ``example_inputs`` and ``dynamic_shapes`` are torch.export.export's
    (``dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}}``).
    The Dim names become the served symbol names; ``buckets`` maps them to
    bucket sizes (default: powers of two up to 64 within each Dim's range).
    ``format`` is ``"pt2"`` or ``"onnx"`` (the torch.onnx dynamo exporter).
    ``config`` adds keys to config.yaml (``{"warmup": "eager"}``). With
    ``check_url``, the server there (serving ``repo``) is asked to load the
    model, and its answer on the example inputs must match eager within
    ``atol``/``rtol`` (else AssertionError).
    """
    torch = _torch()
    if format not in ("pt2", "onnx"):
        raise ValueError(f"xserve.export: format {format!r}: want 'pt2' or 'onnx'")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    name = name or type(model).__name__.lower()
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        raise ValueError(f"xserve.export: model name {name!r}: want a plain directory name")
    if isinstance(model, torch.nn.Module):
        model = model.eval()
    with torch.no_grad():
        ep = torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes, strict=strict)
        # Core ATen, as xserve imports it; output names are the decomposed graph's.
        ep = ep.run_decompositions()
    dims_by_input = _dims_by_position(model, len(example_inputs), dynamic_shapes)
    symbols, config_dims = _symbols(ep, dims_by_input, buckets)
    inputs = list(ep.graph_signature.user_inputs)
    outputs = [str(o) for o in ep.graph_signature.user_outputs]
    cfg: dict[str, Any] = {}
    cfg_inputs = [{"name": n, "dims": d} if d is not None else {"name": n} for n, d in zip(inputs, config_dims)]
    if any("dims" in i for i in cfg_inputs):
        cfg["inputs"] = cfg_inputs
    if symbols:
        cfg["buckets"] = {s.name: s.buckets for s in symbols.values()}
    cfg.update(config or {})

    model_dir = pathlib.Path(repo) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    version = _next_version(model_dir)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{version}.tmp-", dir=model_dir))
    try:
        file = "model.pt2" if format == "pt2" else "model.onnx"
        if format == "pt2":
            torch.export.save(ep, str(tmp / file))
        else:
            torch.onnx.export(ep, (), str(tmp / file), dynamo=True, opset_version=opset, input_names=inputs,
                              output_names=outputs, external_data=False)
        config_path = model_dir / "config.yaml"
        text = _yaml(cfg)
        with tempfile.NamedTemporaryFile("w", dir=model_dir, prefix=".config.", suffix=".tmp", delete=False) as f:
            f.write(text)
        os.chmod(f.name, 0o644)  # mkstemp's 0600 would hide it from a server running as another user
        os.replace(f.name, config_path)
        os.chmod(tmp, 0o755)
        os.rename(tmp, model_dir / str(version))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result = Exported(name, version, model_dir / str(version) / file, config_path, cfg, inputs, outputs, symbols)
    if check_url:
        result.max_abs_error = check(model, example_inputs, result, check_url, atol=atol, rtol=rtol)
    return result


def eager_outputs(model: Any, example_inputs: Sequence[Any]) -> list[np.ndarray]:
    """model(*example_inputs) as a flat list of numpy arrays."""
    torch = _torch()
    with torch.no_grad():
        out = model(*example_inputs)
    flat, _ = torch.utils._pytree.tree_flatten(out)
    return [t.detach().cpu().numpy() for t in flat if isinstance(t, torch.Tensor)]


def check(model: Any, example_inputs: Sequence[Any], exported: Exported, url: str, *, atol: float = 1e-4, rtol: float = 1e-4) -> float:
    """Loads the exported model on the server at url and compares its answer with eager.

    Returns the largest absolute difference; raises AssertionError past the tolerance.
    """
    from .client import Client

    with Client(url) as c:
        c.load(exported.name)
        feed = {n: t.detach().cpu().numpy() for n, t in zip(exported.inputs, example_inputs)}
        got = c.infer(exported.name, feed, version=exported.version)
    want = eager_outputs(model, example_inputs)
    served = [got[n] for n in exported.outputs]
    worst = 0.0
    for n, g, w in zip(exported.outputs, served, want):
        np.testing.assert_allclose(g, w, atol=atol, rtol=rtol, err_msg=f"xserve.export check: output {n!r} of {exported.name} version {exported.version}")
        if w.size:
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))))
    return worst
