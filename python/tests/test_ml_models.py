"""The classical-ML models of testdata/mlmodels (scikit-learn via skl2onnx,
LightGBM and XGBoost via onnxmltools; `make ml-fixtures`) served by a
running xserve, called with tritonclient.http (binary and JSON tensors) and
tritonclient.grpc (typed contents: bytes_contents for BYTES), and compared
with ONNX Runtime's outputs saved beside each model: labels and strings
equal, the outputs case.json lists in "exact" bit for bit, other floats
within atol + rtol * max|ref|.

xserve must serve each case directory as a model named after it (dots and
dashes as underscores) with HTTP at XSERVE_URL and gRPC at XSERVE_GRPC_URL;
cmd/xserve/ml_test.go starts it and runs this file:

    XSERVE_URL=127.0.0.1:8080 XSERVE_GRPC_URL=127.0.0.1:8001 \\
      .venv-triton/bin/python -m pytest python/tests/test_ml_models.py
"""

import json
import os
import pathlib

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

ROOT = pathlib.Path(__file__).resolve().parents[2]
CASES = sorted(p.parent for p in (ROOT / "testdata" / "mlmodels").glob("*/model.onnx"))
NP_TO_V2 = {"float32": "FP32", "float64": "FP64", "int64": "INT64", "int32": "INT32", "bool": "BOOL"}


def model_name(case):
    return case.name.replace(".", "_").replace("-", "_")


def numbered(case, prefix):
    files = sorted(case.glob(prefix + ".*.npy"), key=lambda p: int(p.name.split(".")[1]))
    return [(p.name.split(".", 2)[2][:-4], np.load(p)) for p in files]


def _url(var):
    url = os.environ.get(var)
    if not url:
        pytest.fail(f"set {var} to the address of a running xserve (host:port)")
    return url.removeprefix("http://")


def infer(kind, case):
    """The case's outputs as xserve returns them over kind: http-binary,
    http-json or grpc."""
    inputs = numbered(case, "in")
    outputs = [name for name, _ in numbered(case, "ref")]
    client_mod = grpcclient if kind == "grpc" else httpclient
    url = _url("XSERVE_GRPC_URL" if kind == "grpc" else "XSERVE_URL")
    with client_mod.InferenceServerClient(url=url) as c:
        ins = []
        for name, a in inputs:
            strings = a.dtype.kind == "U"
            t = client_mod.InferInput(name, list(a.shape), "BYTES" if strings else NP_TO_V2[str(a.dtype)])
            data = a.astype(object) if strings else a
            if kind == "grpc":
                t.set_data_from_numpy(data)
            else:
                t.set_data_from_numpy(data, binary_data=kind == "http-binary")
            ins.append(t)
        if kind == "grpc":
            outs = [grpcclient.InferRequestedOutput(n) for n in outputs]
        else:
            outs = [httpclient.InferRequestedOutput(n, binary_data=kind == "http-binary") for n in outputs]
        res = c.infer(model_name(case), ins, outputs=outs)
        return [(n, res.as_numpy(n)) for n in outputs]


@pytest.mark.parametrize("kind", ["http-binary", "http-json", "grpc"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_onnxruntime(kind, case):
    info = json.loads((case / "case.json").read_text())
    got = dict(infer(kind, case))
    for name, want in numbered(case, "ref"):
        g = got[name]
        assert g is not None, f"{name}: no output"
        assert tuple(g.shape) == want.shape, f"{name}: shape {g.shape}, want {want.shape}"
        if want.dtype.kind == "U":
            assert [x.decode() if isinstance(x, bytes) else x for x in g.reshape(-1)] == want.reshape(-1).tolist(), name
        elif want.dtype.kind in "iub" or name in info["exact"]:
            assert g.dtype == want.dtype and np.array_equal(g, want), f"{name}: not ONNX Runtime's values"
        else:
            err = float(np.max(np.abs(g.astype(np.float64) - want)))
            assert err <= info["atol"] + info["rtol"] * float(np.max(np.abs(want))), f"{name}: max abs error {err}"


def test_unknown_category_and_bad_bytes():
    """A category the encoder never saw is all zeros (as in ONNX Runtime);
    a BYTES input whose length prefix overruns the data is a 400 naming
    the input."""
    case = next(c for c in CASES if c.name.startswith("sklearn_onehot_columns"))
    with httpclient.InferenceServerClient(url=_url("XSERVE_URL")) as c:
        t = httpclient.InferInput("color", [1, 1], "BYTES")
        t.set_data_from_numpy(np.array([["magenta"]], dtype=object))
        rest = []
        for name, a in numbered(case, "in")[1:]:
            x = httpclient.InferInput(name, [1, 1], "BYTES" if a.dtype.kind == "U" else "FP32")
            x.set_data_from_numpy(a[:1].astype(object) if a.dtype.kind == "U" else a[:1])
            rest.append(x)
        res = c.infer(model_name(case), [t] + rest)
        probs = res.as_numpy("output_probability")
        assert probs.shape == (1, 3) and abs(float(probs.sum()) - 1) < 1e-5
    import urllib.request
    head = json.dumps({"inputs": [{"name": "color", "datatype": "BYTES", "shape": [1, 1],
                                   "parameters": {"binary_data_size": 6}}]}).encode()
    body = head + (100).to_bytes(4, "little") + b"ab"
    req = urllib.request.Request(f"http://{_url('XSERVE_URL')}/v2/models/{model_name(case)}/infer", data=body,
                                 headers={"Inference-Header-Content-Length": str(len(head)),
                                          "Content-Type": "application/octet-stream"})
    try:
        urllib.request.urlopen(req)
        pytest.fail("a BYTES element longer than its data was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 400
        assert "color" in e.read().decode()
