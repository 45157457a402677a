"""torch.compile(model, backend="xserve") against a real xserve (make python-torch-test).

A CNN with a graph break in the middle: two graphs, each uploaded once;
outputs equal eager; a new batch size makes Dynamo recompile but the graphs
it hands over again are recognised (same program and weights) and not
uploaded; a third size neither recompiles nor uploads. XSERVE_URL and the
NATS protocol work too.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

import xserve
import xserve.backend
from conftest import Xserve


class BreakNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.conv(x)))
        torch._dynamo.graph_break()
        return self.head(h.mean(dim=(2, 3))).softmax(-1)


@pytest.fixture(scope="module")
def served(binary: str, tmp_path_factory: pytest.TempPathFactory):
    s = Xserve(binary, tmp_path_factory.mktemp("repo"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture()
def model() -> BreakNet:
    torch.manual_seed(0)
    m = BreakNet().eval()
    with torch.no_grad():
        m.bn.running_mean.normal_(0, 0.1)
        m.bn.running_var.uniform_(0.5, 1.5)
    torch._dynamo.reset()
    xserve.backend.reset()
    return m


def dynamo_models(url: str) -> list[str]:
    return sorted(e["name"] for e in xserve.Client(url).index() if e["name"].startswith("dynamo-"))


def check(compiled, model: torch.nn.Module, batch: int) -> None:
    x = torch.randn(batch, 3, 16, 16)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-5)


def test_graph_break_uploads_once_per_graph(served: Xserve, model: BreakNet, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = torch.compile(model, backend="xserve", options={"url": served.url, "buckets": {"batch": [1, 2, 4, 8]}})
    check(compiled, model, 2)
    st = xserve.backend.stats()
    assert (st.captured, st.uploaded, st.fallbacks) == (2, 2, 0), st
    names = dynamo_models(served.url)
    assert len(names) == 2 and {g.model for g in st.graphs} == set(names)
    assert all(g.first_call_seconds is not None and g.calls == 1 for g in st.graphs)
    assert xserve.Client(served.url).metadata(names[0])["symbols"][0]["buckets"] == [1, 2, 4, 8]

    check(compiled, model, 5)  # Dynamo recompiles with a dynamic batch: same programs, no upload
    st = xserve.backend.stats()
    assert st.uploaded == 2 and st.fallbacks == 0, st
    check(compiled, model, 3)  # no recompilation either
    check(compiled, model, 8)
    assert xserve.backend.stats().captured == st.captured
    assert xserve.backend.stats().uploaded == 2
    assert dynamo_models(served.url) == names
    print(xserve.backend.stats())

    # Another process (here: a fresh Dynamo) with XSERVE_URL finds the models on the server.
    torch._dynamo.reset()
    xserve.backend.reset()
    monkeypatch.setenv("XSERVE_URL", served.url)
    check(torch.compile(model, backend="xserve"), model, 4)
    st = xserve.backend.stats()
    assert (st.captured, st.uploaded) == (2, 0), st


def test_nats_protocol(served: Xserve, model: BreakNet) -> None:
    compiled = torch.compile(model, backend="xserve", options={"url": served.url, "protocol": "nats", "nats_url": served.nats_url, "nats_nkey": served.nats_nkey})
    check(compiled, model, 2)
    check(compiled, model, 6)
    st = xserve.backend.stats()
    assert st.fallbacks == 0 and sum(g.calls for g in st.graphs) == 4, st


def test_unknown_option(model: BreakNet) -> None:
    compiled = torch.compile(model, backend="xserve", options={"urll": "http://127.0.0.1:1"})
    with pytest.raises(Exception, match="unknown options"):
        compiled(torch.randn(2, 3, 16, 16))


def test_fallback_to_eager(model: BreakNet) -> None:
    """A server that cannot be reached: the graphs run in eager PyTorch, with a warning."""
    compiled = torch.compile(model, backend="xserve", options={"url": "http://127.0.0.1:1"})
    with pytest.warns(UserWarning, match="eager"):
        check(compiled, model, 2)
    assert xserve.backend.stats().fallbacks == 2


def test_bert_encoder_two_inputs(served: Xserve) -> None:
    """The zoo's BERT-shaped encoder (two inputs sharing batch and sequence):
    after Dynamo recompiles for a new sequence length, the sequence is a
    dynamic dim of the uploaded model too, so later lengths and batches
    neither recompile nor upload."""
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "python" / "zoo"))
    import zoo_models

    torch._dynamo.reset()
    xserve.backend.reset()
    spec = zoo_models.build("bert", small=True, seed=0)
    model = spec.module
    compiled = torch.compile(model, backend="xserve", options={"url": served.url})
    gen = torch.Generator().manual_seed(3)
    for batch in (2, 3, 4, 5):  # sequence lengths 16, 7, 16, 16 (zoo_models' make)
        ids, mask = spec.make_inputs(batch, gen)
        if batch == 4:
            ids, mask = ids[:, :11], mask[:, :11]
        with torch.no_grad():
            got, want = compiled(ids, mask), model(ids, mask)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g.numpy(), w.numpy(), atol=1e-4, rtol=1e-4)
    st = xserve.backend.stats()
    assert st.fallbacks == 0 and st.uploaded <= 2 and st.captured == st.uploaded + sum(not g.uploaded for g in st.graphs), st
    print(st)
