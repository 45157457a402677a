"""Sequences of a stateful model over NATS with xserve's NatsClient.

xserve serves silero-vad (16 kHz, no config.yaml: the state is recognised
from the model; `make seq-streams` copies it and writes 64 streams of
chunks with ONNX Runtime's outputs for each stream run alone with its
state carried). NatsClient.infer(sequence_id=, start=, end=) sends a
stream's chunks as one sequence: its first step to any replica, the
later ones to the replica holding the state (the Xserve-Sequence-Subject
of the replies). Runs in .venv (nats-py pinned in python/requirements.txt).
"""

from __future__ import annotations

import pathlib
import shutil
from typing import Iterator

import numpy as np
import pytest

import xserve
from conftest import ROOT, Xserve

SEQ = ROOT / ".cache" / "seq" / "silero_vad_16k"


@pytest.fixture(scope="module")
def silero(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Xserve]:
    if not (SEQ / "ref.npy").exists():
        pytest.fail(f"{SEQ} is missing: run `make seq-streams` (make test does)")
    repo = tmp_path_factory.mktemp("seq-repo")
    shutil.copytree(SEQ / "1", repo / "silero" / "1")
    s = Xserve(binary, repo)
    try:
        yield s
    finally:
        s.stop()


def test_stream_over_nats_equals_onnxruntime(silero: Xserve) -> None:
    chunks, ref = np.load(SEQ / "chunks.npy"), np.load(SEQ / "ref.npy")
    sr = np.array(16000, np.int64)
    with xserve.NatsClient(silero.nats_url, nkey=silero.nats_nkey) as c:
        n = 30
        got = []
        for k in range(n):
            out = c.infer("silero", {"input": chunks[5, k][None], "sr": sr}, sequence_id="nats-5", start=k == 0, end=k == n - 1)
            assert set(out) == {"output"}  # the state stays on the server
            got.append(out["output"][0, 0])
            if 0 < k < n - 1:
                # The later steps went to the replica holding the sequence.
                assert c._c._sticky[("silero", "nats-5")].startswith("xserve.v1.seq.")
        np.testing.assert_allclose(np.array(got), ref[5, :n, 0], rtol=0, atol=1e-5)
        assert ("silero", "nats-5") not in c._c._sticky  # ended: forgotten
        # A step of a sequence never started is refused, naming sequence_start.
        with pytest.raises(xserve.XserveError) as e:
            c.infer("silero", {"input": chunks[6, 0][None], "sr": sr}, sequence_id=12345)
        assert e.value.status == 400 and "not active" in str(e.value)
