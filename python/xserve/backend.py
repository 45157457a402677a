"""torch.compile(model, backend="xserve"): run Dynamo's graphs on an xserve server.

For each FX graph Dynamo captures (one per graph break, and again when it
recompiles for new guards), the backend

1. freezes the graph's parameters and buffers into it and torch.exports it
   with the leading dim of each input dynamic (``Dim.AUTO``), so one upload
   serves every batch size: new sizes go to the server's buckets;
2. names the model after a hash of the exported program and its weights
   (``dynamo-<hash>``), so a graph Dynamo captures again (a recompile with a
   dynamic batch, another process) is not uploaded again;
3. uploads it once through the repository API (``Client.load(files=...)``,
   see docs/HTTP.md) unless the server already serves that name;
4. returns a callable that runs each call as one server request.

A graph that cannot be exported or served falls back to eager PyTorch (and
is counted in ``stats()``). Weights are frozen at compile time: this is for
inference. Options (``torch.compile(..., options={...})``, defaults from the
environment): ``url`` (``XSERVE_URL``, else ``http://127.0.0.1:8080``),
``token`` (``XSERVE_TOKEN``), ``protocol`` (``"http"`` or ``"nats"``),
``nats_url`` (``XSERVE_NATS_URL``), ``nats_nkey`` (``XSERVE_NATS_NKEY``: the
seed file of the embedded NATS server's client user), ``buckets`` (``{"batch": [1, 2, 4, 8]}``),
``fallback`` (``True``: eager on failure; ``False``: raise).

An installed package registers the backend name through the
``torch_dynamo_backends`` entry point (``import xserve`` is enough, as for any
backend torch finds that way); importing this module registers it when the
package is not installed (only on PYTHONPATH).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import re
import threading
import time
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.export import Dim

from .client import Client
from .errors import XserveError


@dataclasses.dataclass
class GraphStats:
    """One graph Dynamo handed to the backend."""

    model: str  # the served model name ("" for a fallback)
    uploaded: bool  # False: the server already had it
    export_seconds: float
    upload_seconds: float
    first_call_seconds: float | None = None  # the first call: export, upload, server compile, request
    calls: int = 0
    fallback_reason: str = ""


@dataclasses.dataclass
class Stats:
    """What the backend did in this process (``xserve.backend.stats()``)."""

    graphs: list[GraphStats] = dataclasses.field(default_factory=list)

    @property
    def captured(self) -> int:
        return len(self.graphs)

    @property
    def uploaded(self) -> int:
        return sum(g.uploaded for g in self.graphs)

    @property
    def fallbacks(self) -> int:
        return sum(bool(g.fallback_reason) for g in self.graphs)

    def __str__(self) -> str:
        lines = [f"xserve backend: {self.captured} graphs captured, {self.uploaded} uploaded, {self.fallbacks} fell back to eager"]
        for g in self.graphs:
            if g.fallback_reason:
                lines.append(f"  eager: {g.fallback_reason}")
            else:
                first = f"{g.first_call_seconds:.3f}s" if g.first_call_seconds is not None else "-"
                lines.append(f"  {g.model}: {'uploaded' if g.uploaded else 'reused'}, export {g.export_seconds:.3f}s, "
                             f"upload {g.upload_seconds:.3f}s, first call {first}, {g.calls} calls")
        return "\n".join(lines)


_stats = Stats()
_lock = threading.Lock()
_uploaded: set[tuple[str, str]] = set()  # (url, model) this process uploaded or found


def stats() -> Stats:
    """The backend's statistics in this process."""
    return _stats


def reset() -> None:
    """Forgets the statistics and which models were uploaded (tests)."""
    global _stats
    with _lock:
        _stats = Stats()
        _uploaded.clear()


@dataclasses.dataclass
class _Options:
    url: str
    token: str | None
    protocol: str
    nats_url: str | None
    nats_nkey: str | None
    buckets: dict[str, list[int]] | None
    fallback: bool

    @classmethod
    def parse(cls, options: dict[str, Any] | None) -> "_Options":
        o = dict(options or {})
        known = {"url", "token", "protocol", "nats_url", "nats_nkey", "buckets", "fallback"}
        unknown = sorted(set(o) - known)
        if unknown:
            raise ValueError(f"xserve backend: unknown options {unknown}; known: {sorted(known)}")
        protocol = o.get("protocol", "http")
        if protocol not in ("http", "nats"):
            raise ValueError(f"xserve backend: protocol {protocol!r}: want 'http' or 'nats'")
        return cls(
            url=o.get("url") or os.environ.get("XSERVE_URL") or "http://127.0.0.1:8080",
            token=o.get("token") or os.environ.get("XSERVE_TOKEN"),
            protocol=protocol,
            nats_url=o.get("nats_url") or os.environ.get("XSERVE_NATS_URL"),
            nats_nkey=o.get("nats_nkey") or os.environ.get("XSERVE_NATS_NKEY"),
            buckets=o.get("buckets"),
            fallback=o.get("fallback", True),
        )


_clients: dict[tuple[str, str | None], Client] = {}
_nats_clients: dict[str, Any] = {}


def _client(o: _Options) -> Client:
    key = (o.url, o.token)
    with _lock:
        if key not in _clients:
            _clients[key] = Client(o.url, token=o.token)
        return _clients[key]


def _nats_client(o: _Options) -> Any:
    from .nats import NatsClient

    url = o.nats_url or "nats://127.0.0.1:4222"
    with _lock:
        if url not in _nats_clients:
            _nats_clients[url] = NatsClient(url, nkey=o.nats_nkey)
        return _nats_clients[url]


def _is_constant(source_name: str, example: Any) -> bool:
    """Whether a graph input is a weight (frozen into the model) rather than data."""
    if isinstance(example, torch.nn.Parameter):
        return True
    return ("._parameters[" in source_name or "._buffers[" in source_name
            or source_name.startswith("G[") or source_name.startswith("L['self']"))


class _Frozen(torch.nn.Module):
    """A Dynamo graph with its weights as buffers: forward takes only the data tensors."""

    def __init__(self, gm: torch.fx.GraphModule, plan: list[tuple[str, int, int]], consts: list[torch.Tensor]) -> None:
        super().__init__()
        self.gm = gm
        self.plan = plan
        for i, c in enumerate(consts):
            self.register_buffer(f"w{i}", c.detach().clone(), persistent=True)

    def forward(self, *data: torch.Tensor) -> Any:
        args: list[Any] = []
        for kind, i, dim in self.plan:
            if kind == "const":
                args.append(getattr(self, f"w{i}"))
            elif kind == "data":
                args.append(data[i])
            elif kind == "size":  # dim `dim` of data input i
                args.append(data[i].size(dim))
            else:  # "stride"
                args.append(data[i].stride(dim))
        return self.gm(*args)


def _source_name(source: Any) -> str:
    """A Dynamo source's name (L['x'], L['self']._modules['a']._parameters['weight'])."""
    name = getattr(source, "name", "")
    return str(name() if callable(name) else name)


def _plan(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[list[tuple[str, int, int]], list[torch.Tensor], list[int]]:
    """How each graph input is fed: a constant, a data tensor, or a data tensor's size.

    Returns the plan, the constants, and the positions of the data inputs.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    plan: list[tuple[str, int, int]] = []
    consts: list[torch.Tensor] = []
    data_pos: list[int] = []
    data_index: dict[str, int] = {}  # source name -> data input number
    pending: list[tuple[int, Any]] = []
    for pos, (node, ex) in enumerate(zip(placeholders, example_inputs)):
        grapharg = node.meta.get("grapharg")
        source = getattr(grapharg, "source", None)
        name = _source_name(source)
        if isinstance(ex, torch.Tensor) and _is_constant(name, ex):
            plan.append(("const", len(consts), 0))
            consts.append(ex)
        elif isinstance(ex, torch.Tensor):
            data_index[name] = len(data_pos)
            plan.append(("data", len(data_pos), 0))
            data_pos.append(pos)
        else:
            plan.append(("size", -1, 0))
            pending.append((len(plan) - 1, source))
    for i, source in pending:
        base = getattr(source, "base", None)
        idx = getattr(source, "idx", None)
        prop = str(getattr(source, "prop", ""))
        bname = _source_name(base)
        kind = "size" if "SIZE" in prop else "stride" if "STRIDE" in prop else ""
        if not kind or bname not in data_index or idx is None:
            raise _Unsupported(f"graph input {i} is a {type(example_inputs[i]).__name__} that is not a size or stride of a tensor input ({source})")
        plan[i] = (kind, data_index[bname], int(idx))
    return plan, consts, data_pos


class _Unsupported(Exception):
    pass


def _export_examples(data: list[torch.Tensor]) -> list[torch.Tensor]:
    """The data inputs for torch.export, a leading dim of 1 made 2 so that it is not specialised."""
    out = []
    for t in data:
        t = t.detach()
        if t.dim() >= 1 and t.shape[0] == 1:
            t = torch.cat([t, t])
        out.append(t)
    return out


_SYMBOL = re.compile(r"\bs\d+\b")


def _model_key(ep: torch.export.ExportedProgram) -> str:
    """A hash of the program (symbol names aside) and of its weights."""
    h = hashlib.sha256()
    h.update(_SYMBOL.sub("s", ep.graph_module.code).encode())
    for name, t in sorted(ep.state_dict.items()):
        h.update(name.encode())
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    for name, t in sorted(ep.constants.items()):
        if isinstance(t, torch.Tensor):
            h.update(name.encode())
            h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _symbolic_dims(gm: torch.fx.GraphModule, data_pos: list[int]) -> list[set[int]]:
    """Per data input, the dims Dynamo traced as symbolic (a recompile marks
    the sizes it saw change dynamic): they are exported dynamic too."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = []
    for p in data_pos:
        val = placeholders[p].meta.get("example_value") if p < len(placeholders) else None
        shape = getattr(val, "shape", ())
        out.append({d for d, size in enumerate(shape) if isinstance(size, torch.SymInt) and d > 0})
    return out


def _export(frozen: _Frozen, data: list[torch.Tensor], symbolic: list[set[int]]) -> torch.export.ExportedProgram:
    """torch.export the frozen graph with the leading dim of each data input dynamic.

    First as one shared batch dim of range [1, inf) (so a batch of 1 has its
    own bucket), then, for graphs whose inputs do not share it, each leading
    dim as torch decides (Dim.AUTO), then at the sizes given. Other dims that
    Dynamo traced as symbolic are Dim.AUTO in each attempt.
    """
    batch = Dim("batch", min=1)

    def spec(lead: Any) -> tuple[dict[int, Any], ...]:
        return tuple(({0: lead} if t.dim() >= 1 else {}) | {d: Dim.AUTO for d in sym} for t, sym in zip(data, symbolic))

    doubled = tuple(_export_examples(data))
    attempts = [(doubled, spec(batch)), (doubled, spec(Dim.AUTO)), (tuple(t.detach() for t in data), spec(Dim.AUTO))]
    err: Exception | None = None
    with torch.no_grad():
        for examples, dyn in attempts:
            try:
                ep = torch.export.export(frozen, examples, dynamic_shapes=(dyn,), strict=False)
            except Exception as e:  # noqa: BLE001 - try the next form
                err = err or e
                continue
            return ep.run_decompositions()
    assert err is not None
    raise err


def _upload(client: Client, name: str, ep: torch.export.ExportedProgram, buckets: dict[str, list[int]] | None) -> bool:
    """Puts the program on the server unless it is there; returns whether it uploaded."""
    key = (client.url, name)
    with _lock:
        if key in _uploaded:
            return False
    if client.model_ready(name):
        with _lock:
            _uploaded.add(key)
        return False
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    config: dict[str, Any] = {"warmup": "lazy"}
    if buckets:
        config["buckets"] = buckets
    client.load(name, files={"1/model.pt2": buf.getvalue()}, config=config)
    with _lock:
        _uploaded.add(key)
    return True


class _Compiled:
    """The callable the backend returns for one graph: on its first call it
    exports the graph (outside Dynamo's tracing, with real inputs) and
    uploads it unless the server has it; every call is then one request."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], o: _Options) -> None:
        self.gm = gm
        self.o = o
        plan, consts, self.data_pos = _plan(gm, example_inputs)
        self.symbolic = _symbolic_dims(gm, self.data_pos)
        self.frozen: _Frozen | None = _Frozen(gm, plan, consts).eval()
        self.stats: GraphStats | None = None
        self.eager = False
        self.name = ""
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self.client = _client(o)
        self.nats = _nats_client(o) if o.protocol == "nats" else None

    def _prepare(self, data: list[torch.Tensor]) -> None:
        assert self.frozen is not None
        t0 = time.perf_counter()
        try:
            ep = _export(self.frozen, data, self.symbolic)
            export_s = time.perf_counter() - t0
            self.name = "dynamo-" + _model_key(ep)
            t1 = time.perf_counter()
            uploaded = _upload(self.client, self.name, ep, self.o.buckets)
            upload_s = time.perf_counter() - t1
        except Exception as e:  # noqa: BLE001 - any failure falls back to eager
            if not self.o.fallback:
                raise
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            warnings.warn(f"xserve backend: running a graph in eager PyTorch: {reason}", stacklevel=3)
            self.eager = True
            self.stats = GraphStats("", False, time.perf_counter() - t0, 0.0, fallback_reason=reason)
        else:
            self.input_names = list(ep.graph_signature.user_inputs)
            self.output_names = [str(n) for n in ep.graph_signature.user_outputs]
            self.stats = GraphStats(self.name, uploaded, export_s, upload_s)
            self.frozen = None  # the server has it now
        with _lock:
            _stats.graphs.append(self.stats)

    @torch._dynamo.disable
    def __call__(self, *args: Any) -> Any:
        data = [args[p] for p in self.data_pos]
        start = time.perf_counter()
        if self.stats is None:
            self._prepare(data)
        if self.eager:
            return self.gm(*args)
        assert self.stats is not None
        feed = {n: t.detach().cpu().numpy() for n, t in zip(self.input_names, data)}
        out = (self.nats or self.client).infer(self.name, feed, outputs=self.output_names)
        if self.stats.first_call_seconds is None:  # export, upload, load, compile and the request
            self.stats.first_call_seconds = time.perf_counter() - start
        self.stats.calls += 1
        return [torch.from_numpy(out[n]) for n in self.output_names]


def xserve_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The Dynamo backend (``torch.compile(model, backend="xserve")``)."""
    o = _Options.parse(options)
    try:
        return _Compiled(gm, example_inputs, o)
    except _Unsupported as e:
        if not o.fallback:
            raise
        warnings.warn(f"xserve backend: running a graph in eager PyTorch: {e}", stacklevel=2)
        with _lock:
            _stats.graphs.append(GraphStats("", False, 0.0, 0.0, fallback_reason=str(e)))
        return gm.forward


def _register() -> None:
    """Registers the name "xserve" unless torch finds it through the entry point.

    An installed package declares the ``torch_dynamo_backends`` entry point,
    and torch registers the name itself once it loads it (importing this
    module): registering it here too would make that fail with "duplicate
    name: xserve". torch lists the entry points it found (list_backends);
    without the entry point (the package on PYTHONPATH), importing this
    module is what makes the name known.
    """
    from torch._dynamo import list_backends, register_backend

    if "xserve" in list_backends(exclude_tags=()):
        return  # the entry point (torch registers it), or registered already
    register_backend(name="xserve")(xserve_backend)


_register()

__all__ = ["GraphStats", "Stats", "reset", "stats", "xserve_backend"]
_ = XserveError  # re-exported for callers catching server errors
