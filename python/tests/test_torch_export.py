"""xserve.export against a real xserve (make python-torch-test, .venv-zoo).

A torchvision ResNet-18, a BERT-shaped encoder (python/zoo/zoo_models.py:
HuggingFace BertModel's layout built from a config, seeded weights, no hub)
and Hugging Face transformers' own BertModel (from a BertConfig, seeded
weights, no hub) are exported into an empty repository that a running xserve serves; the
server loads them through the repository API and must answer as PyTorch
eager does, at the example's sizes and at others within the buckets.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision
from torch.export import Dim

import xserve
from conftest import ROOT, Xserve

sys.path.insert(0, str(ROOT / "python" / "zoo"))
import zoo_models  # noqa: E402


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("repo")


@pytest.fixture(scope="module")
def served(binary: str, repo: pathlib.Path):
    s = Xserve(binary, repo)
    try:
        yield s
    finally:
        s.stop()


def eager(model, *args) -> list[np.ndarray]:
    return xserve.export_.eager_outputs(model, args)


def test_torchvision_resnet18_pt2(served: Xserve, repo: pathlib.Path) -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    batch = Dim("batch", min=1, max=8)
    r = xserve.export(model, (x,), repo=repo, name="resnet", dynamic_shapes={"x": {0: batch}},
                      buckets={"batch": [1, 2, 4]}, check_url=served.url)
    assert r.version == 1 and r.path == repo / "resnet" / "1" / "model.pt2" and r.path.exists()
    assert r.config["inputs"] == [{"name": "x", "dims": ["batch", 3, 64, 64]}]
    assert r.config["buckets"] == {"batch": [1, 2, 4]}
    assert r.max_abs_error is not None and r.max_abs_error < 1e-4
    text = (repo / "resnet" / "config.yaml").read_text()
    assert "dims: [batch, 3, 64, 64]" in text and "batch: [1, 2, 4]" in text
    c = xserve.Client(served.url)
    meta = c.metadata("resnet")
    assert meta["platform"] == "pt2"
    sym = meta["symbols"][0]
    assert sym["name"] == "batch" and sym["buckets"] == [1, 2, 4] and sym["model_symbols"] == [r.symbols["batch"].model_symbol]
    x3 = torch.randn(3, 3, 64, 64)  # padded into bucket 4
    got = c.infer("resnet", {"x": x3.numpy()})
    np.testing.assert_allclose(got[r.outputs[0]], eager(model, x3)[0], atol=1e-4, rtol=1e-4)
    with pytest.raises(xserve.XserveError) as e:
        c.infer("resnet", {"x": torch.randn(5, 3, 64, 64).numpy()})
    assert e.value.status == 400 and "bucket" in e.value.message

    # A second export is the next version; buckets outside the Dim's range are refused.
    r2 = xserve.export(model, (x,), repo=repo, name="resnet", dynamic_shapes={"x": {0: batch}}, buckets={"batch": [1, 2, 4]})
    assert r2.version == 2
    with pytest.raises(ValueError, match="outside the symbol's range"):
        xserve.export(model, (x,), repo=repo, name="resnet", dynamic_shapes={"x": {0: batch}}, buckets={"batch": [4, 16]})
    assert sorted(p.name for p in (repo / "resnet").iterdir()) == ["1", "2", "config.yaml"]


class HFBert(torch.nn.Module):
    """transformers.BertModel as a module of positional tensors."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        cfg = BertConfig(vocab_size=500, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
        torch.manual_seed(0)
        self.bert = BertModel(cfg).eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def test_hf_bert_model(served: Xserve, repo: pathlib.Path) -> None:
    """Hugging Face's BertModel, exported with named dims, served, equal to eager."""
    model = HFBert()
    g = torch.Generator().manual_seed(3)
    ids, mask = torch.randint(0, 500, (2, 16), generator=g), torch.ones(2, 16, dtype=torch.int64)
    batch, seq = Dim("batch", min=1, max=8), Dim("sequence", min=2, max=64)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    r = xserve.export(model, (ids, mask), repo=repo, name="hf_bert", dynamic_shapes=shapes,
                      buckets={"batch": [1, 2, 4], "sequence": [8, 16, 32]}, check_url=served.url)
    assert r.max_abs_error is not None and r.max_abs_error < 1e-4
    ids3 = torch.randint(0, 500, (3, 7), generator=g)
    mask3 = torch.ones(3, 7, dtype=torch.int64)
    mask3[0, 5:] = 0  # a row padded by the client itself
    got = xserve.Client(served.url).infer(r.name, {"input_ids": ids3.numpy(), "attention_mask": mask3.numpy()})
    for name, want in zip(r.outputs, eager(model, ids3, mask3)):
        assert got[name].shape == want.shape
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_bert_encoder(served: Xserve, repo: pathlib.Path, fmt: str) -> None:
    spec = zoo_models.build("bert", small=True, seed=0)
    model = spec.module
    ids, mask = spec.make_inputs(2, torch.Generator().manual_seed(1))  # [2, 16]
    batch, seq = Dim("batch", min=1, max=8), Dim("sequence", min=2, max=64)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    r = xserve.export(model, (ids, mask), repo=repo, name=f"bert_{fmt}", dynamic_shapes=shapes,
                      buckets={"batch": [1, 2, 4], "sequence": [8, 16, 32]}, format=fmt, check_url=served.url)
    assert r.path.name == f"model.{fmt}"
    assert r.config["inputs"] == [{"name": "input_ids", "dims": ["batch", "sequence"]},
                                  {"name": "attention_mask", "dims": ["batch", "sequence"]}]
    assert r.max_abs_error is not None and r.max_abs_error < 1e-4
    c = xserve.Client(served.url)
    names = {s["name"] for s in c.metadata(r.name)["symbols"]}
    assert names == {"batch", "sequence"}
    ids3, mask3 = spec.make_inputs(3, torch.Generator().manual_seed(2))  # [3, 7]
    got = c.infer(r.name, {"input_ids": ids3.numpy(), "attention_mask": mask3.numpy()})
    for name, want in zip(r.outputs, eager(model, ids3, mask3)):
        assert got[name].shape == want.shape
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=1e-4)


def test_cli(served: Xserve, repo: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """python -m xserve export: a factory, example shapes, Dims and buckets from flags."""
    (tmp_path / "climodel.py").write_text(
        "import torch\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))\n")
    env_path = f"{tmp_path}:{ROOT / 'python'}"
    out = subprocess.run(
        [sys.executable, "-m", "xserve", "export", "climodel:build", "--repo", str(repo), "--name", "mlp",
         "--input", "input=3,8", "--dim", "input.0=batch:1:16", "--buckets", "batch=1,2,4,8,16",
         "--check-url", served.url],
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "mlp version 1" in out.stdout and "max abs error" in out.stdout
    assert (repo / "mlp" / "1" / "model.pt2").exists()
    assert xserve.Client(served.url).model_ready("mlp")
