"""tritonclient's sequence API (tritonclient[all]==2.41.1, .venv-triton)
against a running xserve serving silero-vad's 16 kHz model with no
config.yaml as "silero": sequence_id (integer and string), sequence_start
and sequence_end over HTTP and gRPC, unchanged; each stream's outputs equal
ONNX Runtime's for that stream run alone with its state carried (made by
python/seq/silero_streams.py); a stream idle past the server's
--max-sequence-idle (1s here) gets a clear error on its next chunk.

cmd/xserve/triton_test.go's TestTritonSequences starts xserve and runs this
file:

    XSERVE_URL=127.0.0.1:8080 XSERVE_GRPC_URL=127.0.0.1:8001 XSERVE_SEQ_DIR=.cache/seq/silero_vad_16k \\
      .venv-triton/bin/python -m pytest python/tests/test_triton_sequences.py
"""

import os
import pathlib
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

MODEL = "silero"
STREAMS = 16  # per protocol, at once


def _env(var):
    v = os.environ.get(var)
    if not v:
        pytest.fail(f"set {var}")
    return v.removeprefix("http://")


@pytest.fixture(scope="module")
def data():
    d = pathlib.Path(_env("XSERVE_SEQ_DIR"))
    return np.load(d / "chunks.npy"), np.load(d / "ref.npy")


def _client(proto):
    if proto == "http":
        return httpclient, httpclient.InferenceServerClient(url=_env("XSERVE_URL"))
    return grpcclient, grpcclient.InferenceServerClient(url=_env("XSERVE_GRPC_URL"))


def _step(mod, client, chunk, seq, start=False, end=False):
    x = mod.InferInput("input", [1, chunk.size], "FP32")
    x.set_data_from_numpy(chunk[None])
    sr = mod.InferInput("sr", [], "INT64")
    sr.set_data_from_numpy(np.array(16000, np.int64))
    res = client.infer(MODEL, [x, sr], outputs=[mod.InferRequestedOutput("output")],
                       sequence_id=seq, sequence_start=start, sequence_end=end)
    return res.as_numpy("output")


def _stream(proto, chunks, seq, out, errors):
    try:
        mod, client = _client(proto)
        n = len(chunks)
        for c in range(n):
            out[c] = _step(mod, client, chunks[c], seq, start=c == 0, end=c == n - 1)[0]
        client.close()
    except Exception as e:  # reported by the test thread
        errors.append(e)


@pytest.mark.parametrize("proto", ["http", "grpc"])
@pytest.mark.parametrize("ids", ["int", "string"])
def test_concurrent_streams_match_onnxruntime(data, proto, ids):
    chunks, ref = data
    got = np.zeros((STREAMS,) + ref.shape[1:], np.float32)
    errors, threads = [], []
    for s in range(STREAMS):
        seq = 1000 + s if ids == "int" else f"{proto}-stream-{s}"
        t = threading.Thread(target=_stream, args=(proto, chunks[s], seq, got[s], errors))
        threads.append(t)
        t.start()
    for t in threads:
        t.join()
    assert not errors, [(repr(e), str(e)) for e in errors[:3]]
    np.testing.assert_allclose(got, ref[:STREAMS], rtol=0, atol=1e-5)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_unknown_sequence_is_refused(data, proto):
    chunks, _ = data
    mod, client = _client(proto)
    with pytest.raises(InferenceServerException) as e:
        _step(mod, client, chunks[0, 0], 424242)
    assert "not active" in e.value.message() and "sequence_start" in e.value.message()
    assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_idle_stream_expires(data, proto):
    chunks, ref = data
    mod, client = _client(proto)
    seq = 7000 if proto == "http" else "idle-grpc"
    first = _step(mod, client, chunks[0, 0], seq, start=True)
    np.testing.assert_allclose(first, ref[0, 0][None], rtol=0, atol=1e-5)
    time.sleep(1.5)  # the server's --max-sequence-idle is 1s
    with pytest.raises(InferenceServerException) as e:
        _step(mod, client, chunks[0, 1], seq)
    msg = e.value.message()
    assert "expired: idle for more than 1s (max_sequence_idle)" in msg, msg
    assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    # Started again, it runs from the initial state.
    again = _step(mod, client, chunks[0, 0], seq, start=True, end=True)
    np.testing.assert_allclose(again, first, rtol=0, atol=0)


def test_xserve_client_streams_audio(data):
    """xserve's own client: Client.stream sends a stream's chunks as one
    sequence; Client.infer(sequence_id=..., start=..., end=...) one step."""
    import xserve

    chunks, ref = data
    with xserve.Client("http://" + _env("XSERVE_URL")) as c:
        sr = {"sr": np.array(16000, np.int64)}
        got = [o["output"][0] for o in c.stream(MODEL, (x[None] for x in chunks[3]), "sdk-stream", inputs=sr, outputs=["output"])]
        np.testing.assert_allclose(np.array(got), ref[3], rtol=0, atol=1e-5)
        one = c.infer(MODEL, {"input": chunks[4, 0][None], **sr}, sequence_id=99, start=True, end=True)
        np.testing.assert_allclose(one["output"], ref[4, 0][None], rtol=0, atol=1e-5)
        assert set(one) == {"output"}
