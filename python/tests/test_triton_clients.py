"""tritonclient.http and tritonclient.grpc (tritonclient[all]==2.41.1, the
.venv-triton of `make venv-triton`) against a running xserve: metadata,
Triton's model configuration and statistics extensions, and inference with
raw (binary) and JSON / typed tensors, checked against ONNX Runtime run here
on the same model file.

xserve must serve examples/models/tinycnn as "tinycnn" (batch buckets up to
8 or more) with HTTP at XSERVE_URL and gRPC at XSERVE_GRPC_URL (host:port);
cmd/xserve/triton_test.go starts it and runs this file:

    XSERVE_URL=127.0.0.1:8080 XSERVE_GRPC_URL=127.0.0.1:8001 \
      .venv-triton/bin/python -m pytest python/tests/test_triton_clients.py
"""

import pathlib

import grpc
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException
from triton_env import proto, served_url as _url  # noqa: F401 (proto is a fixture)

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_FILE = ROOT / "examples" / "models" / "tinycnn" / "1" / "model.onnx"
MODEL = "tinycnn"


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(7)
    image = rng.standard_normal((3, 3, 32, 32), dtype=np.float32)
    sess = ort.InferenceSession(str(MODEL_FILE), providers=["CPUExecutionProvider"])
    (want,) = sess.run(["probs"], {"image": image})
    return image, want


def _as_dict(kind, msg):
    if kind == "grpc":
        from google.protobuf import json_format

        return json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return msg


def test_metadata(proto):
    kind, _, c = proto
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready(MODEL)
    assert not c.is_model_ready("no-such-model")
    meta = _as_dict(kind, c.get_server_metadata())
    assert meta["name"] == "xserve"
    assert {"model_configuration", "statistics", "system_shared_memory"} <= set(meta["extensions"])
    model = _as_dict(kind, c.get_model_metadata(MODEL))
    assert model["name"] == MODEL
    assert model["inputs"][0]["name"] == "image"
    assert model["inputs"][0]["datatype"] == "FP32"
    assert [int(d) for d in model["inputs"][0]["shape"]] == [-1, 3, 32, 32]


def test_config(proto):
    kind, _, c = proto
    cfg = c.get_model_config(MODEL)
    if kind == "grpc":
        cfg = _as_dict(kind, cfg)["config"]
        # MessageToDict writes int64 as strings and leaves out zero values.
        for t in cfg["input"] + cfg["output"]:
            t["dims"] = [int(d) for d in t["dims"]]
    assert cfg["name"] == MODEL
    assert cfg["max_batch_size"] == 8
    assert cfg["input"][0]["name"] == "image"
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert cfg["input"][0]["dims"] == [3, 32, 32]
    assert cfg["output"][0]["dims"] == [10]
    assert "dynamic_batching" in cfg


def _infer(kind, mod, c, image, binary, model=MODEL):
    inp = mod.InferInput("image", list(image.shape), "FP32")
    if kind == "http":
        inp.set_data_from_numpy(image, binary_data=binary)
        out = mod.InferRequestedOutput("probs", binary_data=binary)
    else:
        inp.set_data_from_numpy(image)
        out = mod.InferRequestedOutput("probs")
    return c.infer(model, [inp], outputs=[out], request_id="r1")


def _infer_typed(image):
    """ModelInfer with fp32_contents instead of raw_input_contents, through
    the protocol's generated stub (tritonclient always sends raw bytes)."""
    with grpc.insecure_channel(_url("XSERVE_GRPC_URL")) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        req = service_pb2.ModelInferRequest(model_name=MODEL, id="typed")
        t = req.inputs.add(name="image", datatype="FP32", shape=list(image.shape))
        t.contents.fp32_contents.extend(image.ravel().tolist())
        resp = stub.ModelInfer(req)
    assert resp.id == "typed" and resp.model_name == MODEL
    out = resp.outputs[0]
    assert out.name == "probs" and out.datatype == "FP32"
    return np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).reshape(list(out.shape))


@pytest.mark.parametrize("binary", [True, False], ids=["raw", "json"])
def test_infer_matches_onnxruntime(proto, batch, binary):
    """raw: binary tensors (HTTP) / raw_input_contents (gRPC); json: JSON
    data (HTTP) / typed contents (gRPC)."""
    kind, mod, c = proto
    image, want = batch
    if kind == "grpc" and not binary:
        got = _infer_typed(image)
    else:
        got = _infer(kind, mod, c, image, binary).as_numpy("probs")
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_grpc_compressed(batch):
    image, want = batch
    with grpcclient.InferenceServerClient(url=_url("XSERVE_GRPC_URL")) as c:
        inp = grpcclient.InferInput("image", list(image.shape), "FP32")
        inp.set_data_from_numpy(image)
        result = c.infer(MODEL, [inp], compression_algorithm="gzip")
    np.testing.assert_allclose(result.as_numpy("probs"), want, atol=1e-5, rtol=1e-5)


def test_statistics(proto, batch):
    kind, mod, c = proto
    image, _ = batch
    before = _as_dict(kind, c.get_inference_statistics(MODEL))["model_stats"][0]
    _infer(kind, mod, c, image, True)
    after = _as_dict(kind, c.get_inference_statistics(MODEL, "1"))["model_stats"][0]
    assert after["name"] == MODEL and after["version"] == "1"
    count = lambda s, k: int(s.get("inference_stats", {}).get(k, {}).get("count", 0))
    assert count(after, "success") == count(before, "success") + 1
    assert int(after["inference_count"]) >= int(before.get("inference_count", 0)) + 3
    assert int(after["inference_stats"]["compute_infer"]["ns"]) > 0
    assert int(after["last_inference"]) > 0
    assert any(int(b["batch_size"]) >= 3 for b in after["batch_stats"])
    every = _as_dict(kind, c.get_inference_statistics())["model_stats"]
    assert [s["name"] for s in every] == [MODEL]


def test_errors(proto, batch):
    kind, mod, c = proto
    image, _ = batch
    inp = mod.InferInput("image", list(image.shape), "FP32")
    inp.set_data_from_numpy(image)
    with pytest.raises(InferenceServerException) as e:
        c.infer("no-such-model", [inp])
    assert "no-such-model" in e.value.message()
    assert e.value.status() == ("404" if kind == "http" else "StatusCode.NOT_FOUND")
    wrong = mod.InferInput("image", list(image.shape), "FP64")
    wrong.set_data_from_numpy(image.astype(np.float64))
    with pytest.raises(InferenceServerException) as e:
        c.infer(MODEL, [wrong])
    assert e.value.status() == ("400" if kind == "http" else "StatusCode.INVALID_ARGUMENT")
    with pytest.raises(InferenceServerException) as e:
        c.get_model_config("no-such-model")
    with pytest.raises(InferenceServerException) as e:
        c.register_system_shared_memory("region", "/../etc/passwd", 64)
    assert "a shared-memory key is one name" in e.value.message()


def test_load_uploaded_model(proto, batch):
    """Triton's load request with file overrides (load_model(files=, config=)):
    the model file and an xserve config go up, and the server serves them.
    The server runs with --model-control-mode explicit."""
    kind, mod, c = proto
    name = f"uploaded_{kind}"
    config = '{"buckets": {"batch": [1, 2, 4]}}'
    c.load_model(name, config=config, files={"file:1/model.onnx": MODEL_FILE.read_bytes()})
    assert c.is_model_ready(name)
    image, want = batch
    got = _infer(kind, mod, c, image, True, model=name).as_numpy("probs")
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(InferenceServerException, match="1/model.onnx|path|file"):
        c.load_model(name, files={"file:../escape.onnx": b"x"})
    c.unload_model(name)  # the other tests see the repository as it was
    assert not c.is_model_ready(name)


def test_system_shared_memory(proto, batch):
    """Triton's system shared-memory extension through tritonclient's own
    utilities, unchanged: the image is written to one region, the
    probabilities come back in another, checked against ONNX Runtime."""
    kind, mod, c = proto
    image, want = batch
    c.unregister_system_shared_memory()
    keys = (f"/xserve_test_in_{kind}", f"/xserve_test_out_{kind}")
    in_region = shm.create_shared_memory_region(f"in_{kind}", keys[0], image.nbytes)
    out_size = want.nbytes + 64  # a region larger than the output
    out_region = shm.create_shared_memory_region(f"out_{kind}", keys[1], out_size)
    try:
        shm.set_shared_memory_region(in_region, [image])
        c.register_system_shared_memory(f"in_{kind}", keys[0], image.nbytes)
        c.register_system_shared_memory(f"out_{kind}", keys[1], out_size)
        status = _as_dict(kind, c.get_system_shared_memory_status())
        regions = status["regions"] if kind == "grpc" else {r["name"]: r for r in status}
        assert regions[f"in_{kind}"]["key"] == keys[0]
        assert int(regions[f"out_{kind}"]["byte_size"]) == out_size
        inp = mod.InferInput("image", list(image.shape), "FP32")
        inp.set_shared_memory(f"in_{kind}", image.nbytes)
        out = mod.InferRequestedOutput("probs")
        out.set_shared_memory(f"out_{kind}", out_size)
        result = c.infer(MODEL, [inp], outputs=[out])
        got_out = _as_dict(kind, result.get_output("probs"))
        assert [int(d) for d in got_out["shape"]] == list(want.shape)
        got = shm.get_contents_as_numpy(out_region, np.float32, list(want.shape))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        # An output place smaller than the output: a clear error.
        small = mod.InferRequestedOutput("probs")
        small.set_shared_memory(f"out_{kind}", want.nbytes - 4)
        with pytest.raises(InferenceServerException) as e:
            c.infer(MODEL, [inp], outputs=[small])
        assert "more than parameters.shared_memory_byte_size" in e.value.message()
        c.unregister_system_shared_memory(f"in_{kind}")
        with pytest.raises(InferenceServerException) as e:
            c.infer(MODEL, [inp], outputs=[out])
        assert f'region "in_{kind}" is not registered' in e.value.message()
    finally:
        c.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(in_region)
        shm.destroy_shared_memory_region(out_region)
