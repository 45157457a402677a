"""An encoder-decoder (T5) through xserve's OpenAI-compatible API and the generate extension.

A real xserve binary serves the small T5 that xserve.export_seq2seq exported
with its tokenizer (make seq2seq-models -> .cache/seq2seq): the text prompt is
the encoder's input, the decoder starts from decoder_start_token_id. The
answers are compared with transformers' greedy generate of each text alone,
decoded by the tokenizer (.cache/seq2seq/refs.json). Run by cmd/xserve's
TestSeq2seqClients with .venv (openai pinned in python/requirements.txt).
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.request
from typing import Any, Iterator

import openai
import pytest

from conftest import ROOT, Xserve

MODEL = "t5"
S2S = ROOT / ".cache" / "seq2seq"


@pytest.fixture(scope="module")
def refs() -> dict:
    path = S2S / "refs.json"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make seq2seq-models` (make test does)")
    r = json.loads(path.read_text())
    return {"new_tokens": r["new_tokens"], "cases": r["models"][MODEL]["cases"]}


@pytest.fixture(scope="module")
def served(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Xserve]:
    repo = tmp_path_factory.mktemp("s2s-repo")
    shutil.copytree(S2S / "repo" / MODEL, repo / MODEL)
    cfg = repo / MODEL / "config.yaml"
    cfg.write_text(cfg.read_text() + "warmup: eager\n")
    s = Xserve(binary, repo)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def client(served: Xserve) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def generate(url: str, text: str, n: int) -> dict[str, Any]:
    body = {"text_input": text, "parameters": {"max_tokens": n, "temperature": 0, "ignore_eos": True}}
    req = urllib.request.Request(f"{url}/v2/models/{MODEL}/generate", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_completion(client: openai.OpenAI, refs: dict) -> None:
    for case in refs["cases"][:3]:
        r = client.completions.create(model=MODEL, prompt=case["text"], max_tokens=refs["new_tokens"], temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.choices[0].text == case["decoded"]
        assert r.usage.completion_tokens == refs["new_tokens"]


def test_completion_stream(client: openai.OpenAI, refs: dict) -> None:
    case = refs["cases"][1]
    chunks = client.completions.create(model=MODEL, prompt=case["text"], max_tokens=refs["new_tokens"], temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    assert "".join(c.choices[0].text for c in chunks if c.choices) == case["decoded"]


def test_generate_extension_concurrent(served: Xserve, refs: dict) -> None:
    """Every case at once (mixed encoder lengths, one decode batch) equals transformers' output of each alone."""
    got: dict[int, str] = {}

    def run(i: int, text: str) -> None:
        got[i] = generate(served.url, text, refs["new_tokens"])["text_output"]

    threads = [threading.Thread(target=run, args=(i, c["text"])) for i, c in enumerate(refs["cases"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got.get(i) for i in range(len(refs["cases"]))] == [c["decoded"] for c in refs["cases"]]


def test_metadata_counts_the_encoder(served: Xserve) -> None:
    """/v2/models/t5's memory_bytes covers the decoder's and the encoder's model files (the memory budget counts both)."""
    with urllib.request.urlopen(f"{served.url}/v2/models/{MODEL}", timeout=30) as r:
        meta = json.loads(r.read())
    files = sum((S2S / "repo" / MODEL / "1" / f).stat().st_size for f in ("model.pt2", "encoder.pt2"))
    assert meta.get("memory_bytes", 0) >= files, meta
