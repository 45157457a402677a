"""tritonclient.http and tritonclient.grpc (tritonclient[all]==2.41.1, the
.venv-triton of `make venv-triton`) against xserve serving a Triton ensemble
as Triton users write it: testdata/pipelines/ensemble, a preprocessing ONNX
graph ("preprocess", uint8 HWC -> normalized float CHW) feeding a CNN
("cnn"), chained by classify_ensemble's config.pbtxt (platform "ensemble",
ensemble_scheduling), with no config.yaml anywhere.

The ensemble's answers are checked against ONNX Runtime running the two
model files here, one after the other; its metadata and Triton's model
configuration must say the two steps are stitched into one executable per
bucket. The same repository holds testdata/pipelines/classifier, a
config.yaml pipeline that takes encoded pictures as a BYTES tensor and
gives labels as one. cmd/xserve/triton_test.go starts xserve on that
repository and runs this file:

    XSERVE_URL=127.0.0.1:8080 XSERVE_GRPC_URL=127.0.0.1:8001 \
      .venv-triton/bin/python -m pytest python/tests/test_triton_ensemble.py
"""

import json
import pathlib
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest
from tritonclient.utils import InferenceServerException
from triton_env import proto, served_url as _url  # noqa: F401 (proto is a fixture)

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPO = ROOT / "testdata" / "pipelines" / "ensemble"
MODEL = "classify_ensemble"


def _session(model):
    return ort.InferenceSession(str(REPO / model / "1" / "model.onnx"), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def reference():
    """The two models run one after the other in ONNX Runtime."""
    pre, cnn = _session("preprocess"), _session("cnn")

    def run(image):
        (pixels,) = pre.run(["pixels"], {"raw": image})
        (probs,) = cnn.run(["probs"], {"input": pixels})
        return probs

    return run


@pytest.mark.parametrize("rows", [1, 3, 8])
def test_ensemble_matches_onnxruntime_in_sequence(proto, reference, rows):
    kind, client, c = proto
    image = np.random.default_rng(rows).integers(0, 256, (rows, 32, 32, 3), dtype=np.uint8)
    inp = client.InferInput("IMAGE", list(image.shape), "UINT8")
    inp.set_data_from_numpy(image)
    res = c.infer(MODEL, [inp], outputs=[client.InferRequestedOutput("PROBS")])
    got = res.as_numpy("PROBS")
    want = reference(image)
    assert got.shape == want.shape == (rows, 10)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_metadata_and_config(proto):
    kind, _, c = proto
    md = c.get_model_metadata(MODEL)
    cfg = c.get_model_config(MODEL)
    if kind == "grpc":
        from google.protobuf import json_format
        md = json_format.MessageToDict(md, preserving_proto_field_name=True)
        cfg = json_format.MessageToDict(cfg, preserving_proto_field_name=True)
    cfg = cfg.get("config", cfg)
    assert md["platform"] == "ensemble"
    assert [i["name"] for i in md["inputs"]] == ["IMAGE"]
    assert [o["name"] for o in md["outputs"]] == ["PROBS"]
    steps = cfg["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["preprocess", "cnn"]
    assert steps[0]["input_map"] == {"raw": "IMAGE"}
    assert steps[1]["output_map"] == {"probs": "PROBS"}
    assert cfg["parameters"]["xserve.pipeline.segments"]["string_value"] == "1"


def test_fused_into_one_executable_per_bucket():
    base = "http://" + _url("XSERVE_URL")
    with urllib.request.urlopen(f"{base}/v2/models/{MODEL}") as r:
        md = json.load(r)
    pipe = md["pipeline"]
    assert len(pipe["segments"]) == 1 and pipe["segments"][0]["fused"], pipe
    assert [s["name"] for s in pipe["steps"]] == ["preprocess", "cnn"]
    assert all(s["fused"] and s["segment"] == 0 for s in pipe["steps"]), pipe
    with urllib.request.urlopen(f"{base}/metrics") as r:
        metrics = r.read().decode()
    assert f'xserve_pipeline_executions{{model="{MODEL}",version="1"}} 1' in metrics


def test_bad_input_names_what(proto):
    _, client, c = proto
    image = np.zeros((1, 16, 32, 3), np.uint8)
    inp = client.InferInput("IMAGE", list(image.shape), "UINT8")
    inp.set_data_from_numpy(image)
    with pytest.raises(InferenceServerException) as e:
        c.infer(MODEL, [inp])
    assert "IMAGE" in str(e.value)
    # the server keeps serving
    ok = client.InferInput("IMAGE", [1, 32, 32, 3], "UINT8")
    ok.set_data_from_numpy(np.zeros((1, 32, 32, 3), np.uint8))
    assert c.infer(MODEL, [ok]).as_numpy("PROBS").shape == (1, 10)


CLASSIFIER = ROOT / "testdata" / "pipelines" / "classifier"


@pytest.mark.parametrize("binary", [True, False])
def test_image_bytes_in_labels_out(proto, binary):
    """The classifier pipeline (config.yaml: image_decode, normalize, the
    model, softmax, top-5 with labels): encoded pictures go in as a BYTES
    tensor and labels come out as one, in the wire form string tensors use
    (OIP BYTES, binary; labels binary or JSON; gRPC bytes_contents), equal to what
    torchvision's preprocessing + the model gave (ref.json)."""
    kind, client, c = proto
    refs = json.loads((CLASSIFIER / "ref.json").read_text())
    pics = np.array([(CLASSIFIER / r["file"]).read_bytes() for r in refs], dtype=np.object_)
    inp = client.InferInput("IMAGE", [len(refs)], "BYTES")
    if kind == "http":
        # encoded pictures are no UTF-8: tritonclient (as Triton's JSON)
        # sends them only as binary data; the labels come back either way
        inp.set_data_from_numpy(pics, binary_data=True)
        outs = [client.InferRequestedOutput(n, binary_data=binary) for n in ("LABELS", "SCORES")]
    else:
        inp.set_data_from_numpy(pics)
        outs = [client.InferRequestedOutput(n) for n in ("LABELS", "SCORES")]
    res = c.infer("classify", [inp], outputs=outs)
    labels, scores = res.as_numpy("LABELS"), res.as_numpy("SCORES")
    assert labels.shape == scores.shape == (len(refs), 5)
    for i, r in enumerate(refs):
        got = [x.decode() if isinstance(x, bytes) else x for x in labels[i]]
        assert got == r["labels"], r["file"]
        np.testing.assert_allclose(scores[i], r["scores"], atol=1e-3)
