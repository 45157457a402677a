"""The KServe/Triton generate extension against xserve, with a plain HTTP client.

POST /v2/models/{m}/generate answers text_output; generate_stream sends the
text as server-sent events. The same real xserve and small Llama as
test_openai.py (conftest's gen_served); the answers are compared with
transformers' greedy generate (.cache/gen/refs.json). Run by cmd/xserve's
TestGenerativeClients with .venv.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterator

import pytest

from conftest import GEN_MODEL as MODEL, Xserve, gen_metric


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def events(resp: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    """The JSON data of each server-sent event of a response."""
    for line in resp:
        if line.startswith(b"data: "):
            yield json.loads(line[len(b"data: "):])


def stream(url: str, path: str, body: dict[str, Any]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def test_generate(gen_served: Xserve, gen_refs: dict) -> None:
    body = {"id": "g1", "text_input": gen_refs["completion_prompt"], "parameters": {"max_tokens": 12, "temperature": 0}}
    for path in (f"/v2/models/{MODEL}/generate", f"/v2/models/{MODEL}/versions/1/generate"):
        status, r = post(gen_served.url + path, body)
        assert status == 200, r
        assert r["text_output"] == gen_refs["completion_greedy_12"]
        assert (r["model_name"], r["model_version"], r["id"]) == (MODEL, "1", "g1")
        assert r["finish_reason"] in ("stop", "length")


def test_generate_stream(gen_served: Xserve, gen_refs: dict) -> None:
    body = {"text_input": gen_refs["completion_prompt"], "parameters": {"max_tokens": 12, "temperature": 0, "stream": True}}
    conn, resp = stream(gen_served.url, f"/v2/models/{MODEL}/generate_stream", body)
    try:
        assert resp.status == 200
        assert resp.getheader("Content-Type", "").startswith("text/event-stream")
        evs = list(events(resp))
    finally:
        conn.close()
    assert len(evs) > 1
    assert "".join(e["text_output"] for e in evs) == gen_refs["completion_greedy_12"]
    assert all(e["model_name"] == MODEL for e in evs)
    assert [bool(e.get("finish_reason")) for e in evs] == [False] * (len(evs) - 1) + [True]


def test_generate_stop_and_seed(gen_served: Xserve, gen_refs: dict) -> None:
    full = gen_refs["completion_greedy_12"]
    stop = full[4:6]
    url = gen_served.url + f"/v2/models/{MODEL}/generate"
    _, r = post(url, {"text_input": gen_refs["completion_prompt"], "parameters": {"max_tokens": 12, "temperature": 0, "stop": [stop]}})
    assert r["text_output"] == full[:full.index(stop)] and r["finish_reason"] == "stop"
    sampled = {"text_input": "hello", "parameters": {"max_tokens": 16, "temperature": 1.2, "top_p": 0.9, "top_k": 20, "seed": 3}}
    assert post(url, sampled)[1]["text_output"] == post(url, sampled)[1]["text_output"]


@pytest.mark.parametrize("path, body, status, match", [
    (f"/v2/models/{MODEL}/generate", {"parameters": {}}, 400, "text_input is required"),
    (f"/v2/models/{MODEL}/generate", {"text_input": "hi", "parameters": {"temperature": 7}}, 400, "temperature must be in"),
    (f"/v2/models/{MODEL}/generate", {"text_input": "hi " * 400}, 400, "more than the model takes"),
    (f"/v2/models/{MODEL}/versions/9/generate", {"text_input": "hi"}, 404, ""),
    ("/v2/models/nope/generate_stream", {"text_input": "hi"}, 404, "nope"),
])
def test_generate_errors(gen_served: Xserve, path: str, body: dict[str, Any], status: int, match: str) -> None:
    got, r = post(gen_served.url + path, body)
    assert got == status, r
    assert match in r["error"]


def test_generate_stream_disconnect_frees_slot(gen_served: Xserve) -> None:
    """A client that goes away mid-stream: its sequence ends (cancelled) and its slot is free again."""
    url = gen_served.url
    cancelled = gen_metric(url, "xserve_generate_sequences", reason="cancelled")
    body = {"text_input": "hello", "parameters": {"max_tokens": 230, "temperature": 0, "ignore_eos": True}}
    conn, resp = stream(url, f"/v2/models/{MODEL}/generate_stream", body)
    assert resp.status == 200
    got = 0
    while got < 3:
        if resp.fp.readline().startswith(b"data: "):
            got += 1
    assert gen_metric(url, "xserve_generate_slots_in_use") == 1
    conn.sock.close()  # the client goes away mid-stream
    conn.close()
    deadline = time.monotonic() + 30
    while gen_metric(url, "xserve_generate_slots_in_use") != 0:
        assert time.monotonic() < deadline, "the slot was not freed"
        time.sleep(0.02)
    assert gen_metric(url, "xserve_generate_sequences", reason="cancelled") == cancelled + 1


def test_sdk_client_generate(gen_served: Xserve, gen_refs: dict) -> None:
    """xserve.Client.generate over the generate extension: whole, streamed, a stream left early, errors."""
    import xserve

    want = gen_refs["completion_greedy_12"]
    with xserve.Client(gen_served.url, timeout=120) as c:
        assert c.generate(MODEL, gen_refs["completion_prompt"], max_tokens=12, temperature=0) == want
        pieces = list(c.generate(MODEL, gen_refs["completion_prompt"], 1, stream=True, max_tokens=12, temperature=0))
        assert len(pieces) > 1 and "".join(pieces) == want
        it = c.generate(MODEL, "hello", stream=True, max_tokens=230, temperature=0, ignore_eos=True)
        assert isinstance(next(it), str)
        it.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while gen_metric(gen_served.url, "xserve_generate_slots_in_use") != 0:
            assert time.monotonic() < deadline, "the slot was not freed"
            time.sleep(0.02)
        with pytest.raises(xserve.XserveError) as e:
            c.generate("nope", "hi")
        assert e.value.status == 404
        with pytest.raises(xserve.XserveError) as e:
            list(c.generate(MODEL, "hi", stream=True, temperature=9))
        assert e.value.status == 400
