"""The official openai client against xserve's OpenAI-compatible API.

A real xserve binary serves a small Llama exported by
xserve.export_causal_lm with its tokenizer and chat template (make
gen-models -> .cache/gen); the answers are compared with transformers'
greedy generate and the tokenizer's decode (.cache/gen/refs.json). Run by
cmd/xserve's TestGenerativeClients with .venv (openai pinned in
python/requirements.txt).
"""

from __future__ import annotations

import http.client
import json
import re
import time

import openai
import pytest

from conftest import GEN_MODEL as MODEL, Xserve, gen_metric


@pytest.fixture(scope="module")
def refs(gen_refs: dict) -> dict:
    return gen_refs


@pytest.fixture(scope="module")
def served(gen_served: Xserve) -> Xserve:
    return gen_served


@pytest.fixture(scope="module")
def client(served: Xserve) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_chat_completion(client: openai.OpenAI, refs: dict) -> None:
    r = client.chat.completions.create(model=MODEL, messages=refs["messages"], max_tokens=12, temperature=0)
    assert r.model == MODEL and r.object == "chat.completion"
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == refs["chat_greedy_12"]
    assert r.usage.prompt_tokens == len(refs["ids"])
    assert r.usage.completion_tokens <= 12
    assert choice.finish_reason in ("stop", "length")


def test_chat_completion_stream(client: openai.OpenAI, refs: dict) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=refs["messages"], max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == refs["chat_greedy_12"]
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == len(refs["ids"])


def test_completion_and_stream(client: openai.OpenAI, refs: dict) -> None:
    r = client.completions.create(model=MODEL, prompt=refs["completion_prompt"], max_tokens=12, temperature=0)
    assert r.choices[0].text == refs["completion_greedy_12"]
    parts = [c.choices[0].text for c in client.completions.create(model=MODEL, prompt=refs["completion_prompt"], max_tokens=12,
                                                                   temperature=0, stream=True)]
    assert "".join(parts) == refs["completion_greedy_12"]


def test_stop_string_and_seed(client: openai.OpenAI, refs: dict) -> None:
    full = refs["completion_greedy_12"]
    stop = full[4:6]
    r = client.completions.create(model=MODEL, prompt=refs["completion_prompt"], max_tokens=12, temperature=0, stop=[stop])
    assert r.choices[0].text == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    a, b = (client.completions.create(model=MODEL, prompt="hello", max_tokens=16, temperature=1.2, seed=3).choices[0].text for _ in range(2))
    assert a == b


def test_errors(client: openai.OpenAI, served: Xserve) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hi")
    with pytest.raises(openai.BadRequestError, match="more than the model takes"):
        client.completions.create(model=MODEL, prompt=[1] * 300)
    with pytest.raises(openai.BadRequestError, match="n must be 1"):
        client.completions.create(model=MODEL, prompt="hi", n=2)


def test_disconnect_frees_slot(served: Xserve) -> None:
    """A client that goes away mid-stream: its sequence ends (cancelled) and its slot is free again."""
    host, port = re.match(r"http://([^:]+):(\d+)", served.url).groups()
    cancelled = gen_metric(served.url, "xserve_generate_sequences", reason="cancelled")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 230, "temperature": 0, "ignore_eos": True, "stream": True})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    events = 0
    while events < 3:
        line = resp.fp.readline()
        if line.startswith(b"data: "):
            events += 1
    assert gen_metric(served.url, "xserve_generate_slots_in_use") == 1
    conn.sock.close()  # the client goes away mid-stream
    conn.close()
    deadline = time.monotonic() + 30
    while gen_metric(served.url, "xserve_generate_slots_in_use") != 0:
        assert time.monotonic() < deadline, "the slot was not freed"
        time.sleep(0.02)
    assert gen_metric(served.url, "xserve_generate_sequences", reason="cancelled") == cancelled + 1
