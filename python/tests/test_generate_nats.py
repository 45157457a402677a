"""Text generation streamed over NATS with the nats-py client.

A request on xserve.v1.generate.<model> (the HTTP generate extension's
body) gets one message per piece of text on its reply subject, then one
with the header Xserve-Stream: end (docs/NATS.md). The same real xserve
(with its embedded NATS server) and small Llama as test_openai.py
(conftest's gen_served); the text equals transformers' greedy generate
(.cache/gen/refs.json); `xserve nats-infer --generate` prints the same
text. Run by cmd/xserve's TestGenerativeClients with
.venv (nats-py pinned in python/requirements.txt).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any

import nats
import pytest
import xserve.nats

from conftest import GEN_MODEL as MODEL, ROOT, Xserve, gen_metric

SUBJECT = "xserve.v1.generate."


async def connect(served: Xserve) -> Any:
    # Each user may read only its own inbox, _INBOX.<public key>.
    return await nats.connect(served.nats_url, nkeys_seed=served.nats_nkey, connect_timeout=10,
                              inbox_prefix=xserve.nats.inbox_prefix(served.nats_nkey))


async def generate(served: Xserve, model: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> list[tuple[str, dict, dict]]:
    """The stream's messages as (kind, headers, body), probes left out."""
    nc = await connect(served)
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(SUBJECT + model, json.dumps(body).encode(), reply=inbox, headers=headers)
        out = []
        while True:
            m = await sub.next_msg(timeout=120)
            kind = (m.headers or {}).get("Xserve-Stream", "")
            if kind == "probe":
                continue
            out.append((kind, m.headers or {}, json.loads(m.data)))
            if kind == "end":
                return out
    finally:
        await nc.close()


def test_stream_equals_transformers(gen_served: Xserve, gen_refs: dict) -> None:
    msgs = asyncio.run(generate(gen_served, MODEL, {"text_input": gen_refs["completion_prompt"],
                                                    "parameters": {"max_tokens": 12, "temperature": 0}}, {"Xserve-Model-Version": "1"}))
    assert [k for k, _, _ in msgs] == ["data"] * (len(msgs) - 1) + ["end"]
    assert len(msgs) > 2
    assert "".join(b["text_output"] for _, _, b in msgs) == gen_refs["completion_greedy_12"]
    end = msgs[-1][2]
    assert end["finish_reason"] in ("stop", "length") and end["model_name"] == MODEL and end["model_version"] == "1"
    assert 0 < end["generated_tokens"] <= 12


def test_errors(gen_served: Xserve) -> None:
    for model, body, code, match in [
        (MODEL, {"parameters": {}}, "400", "text_input is required"),
        (MODEL, {"text_input": "hi", "parameters": {"top_p": 3}}, "400", "top_p must be in"),
        ("nope", {"text_input": "hi"}, "404", "nope"),
    ]:
        msgs = asyncio.run(generate(gen_served, model, body))
        assert len(msgs) == 1
        kind, headers, reply = msgs[0]
        assert kind == "end" and headers["Xserve-Error"] == code, msgs
        assert match in reply["error"]


def test_client_gone_frees_slot(gen_served: Xserve) -> None:
    """A client that unsubscribes mid-stream: the replica's probe finds no one, the sequence ends (cancelled), the slot is free."""
    url = gen_served.url
    cancelled = gen_metric(url, "xserve_generate_sequences", reason="cancelled")
    length = gen_metric(url, "xserve_generate_sequences", reason="length")

    async def leave_after_three() -> None:
        nc = await connect(gen_served)
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        body = {"text_input": "hello", "parameters": {"max_tokens": 230, "temperature": 0, "ignore_eos": True}}
        await nc.publish(SUBJECT + MODEL, json.dumps(body).encode(), reply=inbox)
        got = 0
        while got < 3:
            m = await sub.next_msg(timeout=120)
            if (m.headers or {}).get("Xserve-Stream") == "data":
                got += 1
        assert gen_metric(url, "xserve_generate_slots_in_use") == 1
        await sub.unsubscribe()
        await nc.close()

    asyncio.run(leave_after_three())
    deadline = time.monotonic() + 30
    while gen_metric(url, "xserve_generate_slots_in_use") != 0:
        assert time.monotonic() < deadline, "the slot was not freed"
        time.sleep(0.02)
    # The replica probes the reply subject every 200 ms: on an idle machine
    # the small model can write all 230 tokens before the probe after the
    # unsubscribe, and the sequence then ends at its length instead.
    ended = (gen_metric(url, "xserve_generate_sequences", reason="cancelled") - cancelled,
             gen_metric(url, "xserve_generate_sequences", reason="length") - length)
    assert ended in ((1, 0), (0, 1)), ended


def nats_infer(binary: str, served: Xserve, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary, "nats-infer", "--nats-url", served.nats_url, "--nkey", served.nats_nkey, "--timeout", "2m", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)


def test_nats_infer_generate(binary: str, gen_served: Xserve, gen_refs: dict) -> None:
    r = nats_infer(binary, gen_served, "--model", MODEL, "--generate", gen_refs["completion_prompt"],
                   "--params", json.dumps({"max_tokens": 12, "temperature": 0}))
    assert r.returncode == 0, r.stderr
    assert r.stdout == gen_refs["completion_greedy_12"] + "\n"
    assert f"model {MODEL} version 1" in r.stderr and "generated in" in r.stderr
    r = nats_infer(binary, gen_served, "--model", "nope", "--generate", "hi")
    assert r.returncode != 0 and "nope" in r.stderr


def test_sdk_nats_client_generate(gen_served: Xserve, gen_refs: dict) -> None:
    """xserve.NatsClient.generate: whole, streamed, a stream left early frees its slot, errors."""
    import xserve

    want = gen_refs["completion_greedy_12"]
    with xserve.NatsClient(gen_served.nats_url, nkey=gen_served.nats_nkey, timeout=120) as c:
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
