"""torch.compile(backend="xserve") as a new user gets it: the package installed
(its torch_dynamo_backends entry point), ``import xserve``, then the backend by
name. torch loads the entry point, which imports xserve.backend; that import
must not register the name a second time ("AssertionError: duplicate name:
xserve"). Run by cmd/xserve's TestTorchBackendEntryPoint with .venv-zoo.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

USER = """
import warnings, torch, xserve
f = torch.compile(torch.nn.Linear(2, 2), backend="xserve", options={"url": "http://127.0.0.1:1"})
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    y = f(torch.randn(3, 2))
assert y.shape == (3, 2), y.shape
assert any("running a graph in eager PyTorch" in str(x.message) for x in w), [str(x.message) for x in w]
import xserve.backend
assert xserve.backend.stats().fallbacks == 1, xserve.backend.stats()
print("ok")
"""


def test_installed_package_backend_by_name(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), str(ROOT / "python")],
                   check=True, cwd=tmp_path)
    assert list(target.glob("xserve-*.dist-info/entry_points.txt")), "the wheel declares no entry point"
    # Run outside the checkout, so that only the installed package is importable.
    out = subprocess.run([sys.executable, "-c", USER], cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("ok"), out.stdout + out.stderr
