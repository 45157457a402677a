"""The xserve Python clients against a real xserve binary (see conftest.py).

Round trips over HTTP (blocking and asyncio) and NATS must equal ONNX
Runtime's outputs for examples/models/tinycnn; errors must carry the
server's status and message; the package must install from its directory
and from a built wheel.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest

import xserve
from conftest import ROOT, Xserve

MODEL = "tinycnn"


@pytest.fixture(scope="module")
def reference():
    sess = ort.InferenceSession(str(ROOT / "examples/models/tinycnn/1/model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)

    def run(batch: int) -> tuple[np.ndarray, np.ndarray]:
        image = rng.standard_normal((batch, 3, 32, 32), dtype=np.float32)
        (probs,) = sess.run(["probs"], {"image": image})
        return image, probs

    return run


@pytest.fixture(scope="module")
def client(server: Xserve):
    with xserve.Client(server.url) as c:
        yield c


def test_health_metadata_index(client: xserve.Client) -> None:
    assert client.server_live()
    assert client.server_ready()
    assert client.model_ready(MODEL)
    assert client.model_ready(MODEL, version=1)
    assert not client.model_ready("no-such-model")
    assert "binary_tensor_data" in client.server_metadata()["extensions"]
    meta = client.metadata(MODEL)
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert meta["platform"] == "onnx"
    assert {"name": MODEL, "version": "1", "state": "READY", "reason": ""} in client.index()
    assert [e["name"] for e in client.index(ready=True)] == [MODEL]
    cfg = client.config(MODEL)  # Triton's model configuration extension
    assert cfg is not None and cfg["name"] == MODEL and cfg["input"][0]["name"] == "image"


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_infer_matches_onnxruntime(client: xserve.Client, reference, batch: int) -> None:
    image, want = reference(batch)
    out = client.infer(MODEL, {"image": image})
    assert list(out) == ["probs"]
    assert out["probs"].dtype == np.float32 and out["probs"].shape == want.shape
    np.testing.assert_allclose(out["probs"], want, atol=1e-5, rtol=0)
    out = client.infer(MODEL, {"image": image}, version=1, outputs=["probs"], request_id="r1")
    np.testing.assert_allclose(out["probs"], want, atol=1e-5, rtol=0)


def test_errors_carry_status_and_message(client: xserve.Client, reference) -> None:
    image, _ = reference(2)
    with pytest.raises(xserve.XserveError) as e:
        client.infer("no-such-model", {"image": image})
    assert e.value.status == 404 and "no-such-model" in e.value.message
    with pytest.raises(xserve.XserveError) as e:
        client.infer(MODEL, {"image": image.astype(np.float64)})
    assert e.value.status == 400 and "float32" in e.value.message
    with pytest.raises(xserve.XserveError) as e:
        client.infer(MODEL, {"image": image}, version=9)
    assert e.value.status == 404
    with pytest.raises(xserve.XserveError) as e:
        client.infer(MODEL, {"image": np.zeros((100, 3, 32, 32), np.float32)})
    assert e.value.status == 400 and "bucket" in e.value.message
    # The connection still serves good requests after each error.
    assert client.infer(MODEL, {"image": image})["probs"].shape == (2, 10)
    with pytest.raises(xserve.XserveError) as e:
        xserve.Client("http://127.0.0.1:1").server_metadata()
    assert e.value.status == 0


def test_unload_and_load(client: xserve.Client, reference) -> None:
    image, want = reference(1)
    client.unload(MODEL)
    assert not client.model_ready(MODEL)
    with pytest.raises(xserve.XserveError) as e:
        client.infer(MODEL, {"image": image})
    assert e.value.status in (404, 503)
    client.load(MODEL)
    assert client.model_ready(MODEL)
    np.testing.assert_allclose(client.infer(MODEL, {"image": image})["probs"], want, atol=1e-5, rtol=0)
    with pytest.raises(xserve.XserveError) as e:
        client.load("../etc")
    assert e.value.status == 404


def test_async_client(server: Xserve, reference) -> None:
    cases = [reference(b) for b in (1, 2, 4, 5)]

    async def main() -> list[dict[str, np.ndarray]]:
        async with xserve.AsyncClient(server.url, max_connections=2) as c:
            assert await c.server_live() and await c.server_ready() and await c.model_ready(MODEL)
            assert not await c.model_ready("no-such-model")
            assert (await c.metadata(MODEL))["name"] == MODEL
            assert {"name": MODEL, "version": "1", "state": "READY", "reason": ""} in await c.index()
            with pytest.raises(xserve.XserveError) as e:
                await c.infer(MODEL, {"image": cases[0][0].astype(np.float64)})
            assert e.value.status == 400 and "float32" in e.value.message
            # Concurrent requests, more than the idle pool keeps, twice over.
            first = await asyncio.gather(*(c.infer(MODEL, {"image": image}) for image, _ in cases))
            again = await asyncio.gather(*(c.infer(MODEL, {"image": image}, outputs=["probs"]) for image, _ in cases))
            return first + again

    for out, (_, want) in zip(asyncio.run(main()), cases + cases):
        np.testing.assert_allclose(out["probs"], want, atol=1e-5, rtol=0)
    with pytest.raises(xserve.XserveError) as e:
        asyncio.run(xserve.AsyncClient("http://127.0.0.1:1").server_metadata())
    assert e.value.status == 0


def test_nats_client(server: Xserve, reference) -> None:
    with xserve.NatsClient(server.nats_url, nkey=server.nats_nkey) as nc:
        for batch in (1, 3):
            image, want = reference(batch)
            out = nc.infer(MODEL, {"image": image})
            np.testing.assert_allclose(out["probs"], want, atol=1e-5, rtol=0)
            out = nc.infer(MODEL, {"image": image}, version=1, outputs=["probs"], request_id=f"n{batch}")
            np.testing.assert_allclose(out["probs"], want, atol=1e-5, rtol=0)
        with pytest.raises(xserve.XserveError) as e:
            nc.infer(MODEL, {"image": image.astype(np.float64)})
        assert e.value.status == 400 and "float32" in e.value.message
        with pytest.raises(xserve.XserveError) as e:
            nc.infer(MODEL, {"image": image}, version=9)
        assert e.value.status == 404
        with pytest.raises(xserve.XserveError) as e:
            nc.infer("no-such-model", {"image": image})
        assert e.value.status == 404 and "no-such-model" in e.value.message


def test_async_nats_client(server: Xserve, reference) -> None:
    cases = [reference(b) for b in (1, 2, 6)]

    async def main() -> list[dict[str, np.ndarray]]:
        async with await xserve.AsyncNatsClient.connect(server.nats_url, nkey=server.nats_nkey) as nc:
            return await asyncio.gather(*(nc.infer(MODEL, {"image": image}) for image, _ in cases))

    for out, (_, want) in zip(asyncio.run(main()), cases):
        np.testing.assert_allclose(out["probs"], want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("how", ["directory", "wheel"])
def test_package_installs(tmp_path: pathlib.Path, how: str) -> None:
    """pip install ./python and pip install <built wheel> both give a working package."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    target = tmp_path / "site"
    # Build from a copy: setuptools writes build/ and *.egg-info beside the sources.
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "python" / "xserve", copy / "xserve", ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / "python" / f, copy / f)
    src = str(copy)
    if how == "wheel":
        subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), src], check=True, cwd=tmp_path)
        wheels = list((tmp_path / "dist").glob("xserve-*.whl"))
        assert len(wheels) == 1, wheels
        src = str(wheels[0])
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", "--target", str(target), src], check=True, cwd=tmp_path)
    assert (target / "xserve" / "py.typed").exists()
    code = "import xserve, sys; print(xserve.__file__); assert hasattr(xserve.Client, 'infer')"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.stdout.startswith(str(target))


def test_upload_model(client: xserve.Client, reference, tinycnn_repo: pathlib.Path) -> None:
    """A model loaded from uploaded bytes and config (Triton's load with file overrides)."""
    onnx = (ROOT / "examples/models/tinycnn/1/model.onnx").read_bytes()
    client.load("uploaded", files={"1/model.onnx": onnx}, config={"buckets": {"batch": [1, 2, 4]}, "warmup": "lazy"})
    assert client.model_ready("uploaded", version=1)
    assert client.metadata("uploaded")["symbols"][0]["buckets"] == [1, 2, 4]
    image, want = reference(3)
    np.testing.assert_allclose(client.infer("uploaded", {"image": image})["probs"], want, atol=1e-5, rtol=0)
    assert sorted(p.name for p in (tinycnn_repo / "uploaded").iterdir()) == ["1", "config.yaml"]
    # A second version replaces the first (the default version policy serves the latest).
    client.load("uploaded", files={"2/model.onnx": onnx})
    assert client.model_ready("uploaded", version=2) and not client.model_ready("uploaded", version=1)
    np.testing.assert_allclose(client.infer("uploaded", {"image": image})["probs"], want, atol=1e-5, rtol=0)
    with pytest.raises(xserve.XserveError) as e:
        client.load("uploaded", files={"../escape/model.onnx": onnx})
    assert e.value.status == 400 and "want <version>/<file>" in e.value.message
    with pytest.raises(xserve.XserveError) as e:
        client.load("uploaded", files={"3/model.onnx": onnx}, config={"bukets": {}})
    assert e.value.status == 400 and "bukets" in e.value.message
    assert not (tinycnn_repo / "uploaded" / "3").exists()
    client.unload("uploaded")


def test_package_is_typed() -> None:
    """mypy finds no error in the package (torch and nats are not needed for it)."""
    out = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--no-incremental",
                          "--cache-dir", os.devnull, "xserve"], cwd=ROOT / "python", capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_token_and_tls(binary: str, tinycnn_repo: pathlib.Path, tmp_path: pathlib.Path, reference) -> None:
    """A server with HTTPS and bearer tokens: the client verifies it with ca_file,
    sends its token, and gets 401/403 as XserveError without or with a token that
    lacks the admin scope."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    tokens = tmp_path / "tokens"
    tokens.write_text("reader-token\nadmin-token admin\n")
    s = Xserve(binary, tinycnn_repo, "--tls-cert", str(cert), "--tls-key", str(key),
               "--auth-tokens-file", str(tokens), "--auth-open-health", "--nats=false", https=True)
    try:
        image, want = reference(2)
        reader = xserve.Client(s.url, token="reader-token", ca_file=str(cert))
        np.testing.assert_allclose(reader.infer(MODEL, {"image": image})["probs"], want, atol=1e-5, rtol=0)
        with pytest.raises(xserve.XserveError) as e:
            reader.load(MODEL)
        assert e.value.status == 403
        with pytest.raises(xserve.XserveError) as e:
            xserve.Client(s.url, ca_file=str(cert)).infer(MODEL, {"image": image})
        assert e.value.status == 401
        with pytest.raises(xserve.XserveError) as e:  # the server's certificate is not trusted by default
            xserve.Client(s.url, token="reader-token").metadata(MODEL)
        assert e.value.status == 0 and "CERTIFICATE" in e.value.message.upper()
        assert xserve.Client(s.url, token="reader-token", insecure=True).model_ready(MODEL)
        admin = xserve.Client(s.url, token="admin-token", ca_file=str(cert))
        admin.load("uploaded_tls", files={"1/model.onnx": (ROOT / "examples/models/tinycnn/1/model.onnx").read_bytes()})

        async def run_async() -> dict[str, np.ndarray]:
            async with xserve.AsyncClient(s.url, token="admin-token", ca_file=str(cert)) as c:
                return await c.infer("uploaded_tls", {"image": image})

        np.testing.assert_allclose(asyncio.run(run_async())["probs"], want, atol=1e-5, rtol=0)
    finally:
        s.stop()
