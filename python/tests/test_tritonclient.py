"""The official Triton HTTP client (tritonclient[http]) against a running xserve.

xserve must already serve examples/models/tinycnn as "tinycnn" at XSERVE_URL
(host:port or http://host:port); cmd/xserve/serve_test.go starts it and runs
this file:

    XSERVE_URL=127.0.0.1:8080 .venv/bin/python -m pytest python/tests/test_tritonclient.py
"""

import os
import pathlib

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "samples" / "tinycnn"
MODEL = "tinycnn"


@pytest.fixture(scope="module")
def client():
    url = os.environ.get("XSERVE_URL")
    if not url:
        pytest.fail("set XSERVE_URL to the address of a running xserve (host:port)")
    url = url.removeprefix("http://")
    with httpclient.InferenceServerClient(url=url) as c:
        yield c


@pytest.fixture(scope="module")
def sample():
    image = np.load(SAMPLE / "image.npy")
    want = np.load(SAMPLE / "probs.onnxruntime.npy")
    return image, want


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(MODEL)
    meta = client.get_server_metadata()
    assert meta["name"] == "xserve"
    assert "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata(MODEL)
    assert model["name"] == MODEL
    assert model["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert model["outputs"][0]["name"] == "probs"
    index = client.get_model_repository_index()
    assert {"name": MODEL, "version": "1", "state": "READY", "reason": ""} in index


@pytest.mark.parametrize("binary_in", [False, True], ids=["json-in", "binary-in"])
@pytest.mark.parametrize("binary_out", [False, True], ids=["json-out", "binary-out"])
def test_infer_matches_onnxruntime(client, sample, binary_in, binary_out):
    image, want = sample
    inp = httpclient.InferInput("image", list(image.shape), "FP32")
    inp.set_data_from_numpy(image, binary_data=binary_in)
    out = httpclient.InferRequestedOutput("probs", binary_data=binary_out)
    result = client.infer(MODEL, [inp], outputs=[out], request_id="req-7")
    got = result.as_numpy("probs")
    assert got.dtype == np.float32
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    response = result.get_response()
    assert response["id"] == "req-7"
    assert response["model_name"] == MODEL
    assert ("data" in response["outputs"][0]) == (not binary_out)


def test_infer_all_outputs_binary_by_default(client, sample):
    image, want = sample
    inp = httpclient.InferInput("image", list(image.shape), "FP32")
    inp.set_data_from_numpy(image)
    result = client.infer(MODEL, [inp], model_version="1")
    np.testing.assert_allclose(result.as_numpy("probs"), want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_infer_compressed(client, sample, algorithm):
    image, want = sample
    inp = httpclient.InferInput("image", list(image.shape), "FP32")
    inp.set_data_from_numpy(image)
    result = client.infer(
        MODEL,
        [inp],
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_allclose(result.as_numpy("probs"), want, atol=1e-5, rtol=0)


def test_errors_reach_the_client(client, sample):
    image, _ = sample
    inp = httpclient.InferInput("image", list(image.shape), "FP32")
    inp.set_data_from_numpy(image)
    with pytest.raises(InferenceServerException) as e:
        client.infer("no-such-model", [inp])
    assert e.value.status() == "404"
    assert "no-such-model" in e.value.message()

    wrong = httpclient.InferInput("image", [2, 3, 32, 32], "FP64")
    wrong.set_data_from_numpy(image.astype(np.float64))
    with pytest.raises(InferenceServerException) as e:
        client.infer(MODEL, [wrong])
    assert e.value.status() == "400"
    assert "float32" in e.value.message()
