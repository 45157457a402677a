"""tritonclient's gRPC streaming client (ModelStreamInfer) generating text from xserve.

The same real xserve and small Llama as test_openai.py (conftest's
gen_served): text_input and sampling_parameters as Triton's vLLM backend
takes them, one text_output per piece of text, the end marked
(triton_final_response); the text equals transformers' greedy generate
(.cache/gen/refs.json). Run by cmd/xserve's TestGenerativeTritonGRPC with
.venv-triton (tritonclient[all] pinned there).
"""

from __future__ import annotations

import json
import queue
import time
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import GEN_MODEL as MODEL, Xserve, gen_metric


def bytes_input(name: str, value: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, [1], "BYTES")
    t.set_data_from_numpy(np.array([value.encode()], dtype=np.object_))
    return t


class Stream:
    """A tritonclient gRPC stream whose responses land in a queue."""

    def __init__(self, served: Xserve) -> None:
        self.client = grpcclient.InferenceServerClient(url=served.grpc_addr())
        self.results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, request_id: str, prompt: str, params: dict[str, Any], **kw: Any) -> None:
        self.client.async_stream_infer(MODEL, [bytes_input("text_input", prompt), bytes_input("sampling_parameters", json.dumps(params))],
                                       request_id=request_id, **kw)

    def next(self) -> tuple[str, str | None, bool]:
        """The next response: its request id, its text (None: no output) and whether it is the last."""
        result, error = self.results.get(timeout=120)
        if error is not None:
            raise error
        resp = result.get_response()
        out = result.as_numpy("text_output")
        text = None if out is None else out[0].decode()
        return resp.id, text, resp.parameters["triton_final_response"].bool_param

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(gen_served: Xserve) -> Any:
    s = Stream(gen_served)
    yield s
    s.close()


def test_stream_equals_transformers(stream: Stream, gen_refs: dict) -> None:
    """Two requests on one stream, run together: each one's pieces, joined, are transformers' greedy text."""
    params = {"max_tokens": 12, "temperature": 0}
    stream.send("a", gen_refs["completion_prompt"], params, enable_empty_final_response=True)
    stream.send("b", gen_refs["completion_prompt"], params)
    texts: dict[str, list[str]] = {"a": [], "b": []}
    ends: dict[str, list[bool]] = {"a": [], "b": []}
    while not all(e and e[-1] for e in ends.values()):
        rid, text, final = stream.next()
        ends[rid].append(final)
        if text is not None:
            texts[rid].append(text)
    for rid in "ab":
        assert "".join(texts[rid]) == gen_refs["completion_greedy_12"]
        assert ends[rid].count(True) == 1
        assert len(ends[rid]) > 2
    # enable_empty_final_response: the end comes on a response of its own.
    assert len(ends["a"]) == len(texts["a"]) + 1


def test_whole_text_and_parameters(stream: Stream, gen_refs: dict) -> None:
    """stream false: one response; request parameters (max_tokens as an int) override sampling_parameters."""
    stream.client.async_stream_infer(MODEL, [bytes_input("text_input", gen_refs["completion_prompt"]),
                                             bytes_input("sampling_parameters", json.dumps({"temperature": 0, "max_tokens": 3, "stream": False}))],
                                     request_id="w", parameters={"max_tokens": 12})
    rid, text, final = stream.next()
    assert (rid, text, final) == ("w", gen_refs["completion_greedy_12"], True)


def test_bad_request(stream: Stream) -> None:
    stream.send("bad", "hello", {"temperature": 9})
    with pytest.raises(Exception, match="temperature must be in"):
        stream.next()


def test_cancel_frees_slot(gen_served: Xserve) -> None:
    """A client that cancels its stream mid-generation: the sequence ends (cancelled) and its slot is free."""
    url = gen_served.url
    cancelled = gen_metric(url, "xserve_generate_sequences", reason="cancelled")
    s = Stream(gen_served)
    s.send("long", "hello", {"max_tokens": 230, "temperature": 0, "ignore_eos": True})
    for _ in range(3):
        assert s.next()[1] is not None
    assert gen_metric(url, "xserve_generate_slots_in_use") == 1
    s.client.stop_stream(cancel_requests=True)
    s.client.close()
    deadline = time.monotonic() + 30
    while gen_metric(url, "xserve_generate_slots_in_use") != 0:
        assert time.monotonic() < deadline, "the slot was not freed"
        time.sleep(0.02)
    assert gen_metric(url, "xserve_generate_sequences", reason="cancelled") == cancelled + 1
