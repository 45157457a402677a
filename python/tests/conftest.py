"""Fixtures that start a real xserve binary on free loopback ports.

The binary is $XSERVE_BIN (cmd/xserve's Go tests build it and set it), or
one built here with `go build` into a temporary directory. xserve runs from
the repository root so that it finds the PJRT plugin under .cache/pjrt.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

LISTEN_RE = re.compile(r'msg="listening on [^"]*" addr=(\S+)')
GRPC_RE = re.compile(r'msg="gRPC listening on [^"]*" addr=(\S+)')
NATS_RE = re.compile(r"nats_url=(nats://\S+)")
NKEY_RE = re.compile(r"client_nkey=(\S+)")


def xserve_binary(tmp: pathlib.Path) -> str:
    b = os.environ.get("XSERVE_BIN")
    if b:
        return b
    out = tmp / "xserve"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/xserve"], cwd=ROOT, check=True)
    return str(out)


class Xserve:
    """A running `xserve serve`: url (http://...), nats_url, log, stop()."""

    def __init__(self, binary: str, repo: pathlib.Path, *extra: str, https: bool = False) -> None:
        self.cache = tempfile.mkdtemp(prefix="xserve-cache-")
        args = [binary, "serve", "--model-repo", str(repo), "--http-addr", "127.0.0.1:0",
                "--nats-listen", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--compile-cache", self.cache, "--model-control-mode", "explicit", *extra]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._seen = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = ("https://" if https else "http://") + self._wait(LISTEN_RE)
        self.nats_url = "" if "--nats=false" in extra else self._wait(NATS_RE)
        # The embedded NATS server's client seed (0600), for NatsClient(nkey=).
        self.nats_nkey = "" if "--nats=false" in extra else self._wait(NKEY_RE)
        deadline = time.monotonic() + 180
        while True:
            try:
                ctx = ssl._create_unverified_context() if https else None  # only polls readiness
                with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=5, context=ctx) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("xserve did not get ready:\n" + self.log)
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()
        with self._seen:
            self._seen.notify_all()

    def _wait(self, pattern: re.Pattern[str]) -> str:
        deadline = time.monotonic() + 180
        with self._seen:
            while True:
                for line in self.lines:
                    m = pattern.search(line)
                    if m:
                        return m.group(1)
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"xserve never logged {pattern.pattern}:\n" + "".join(self.lines))
                self._seen.wait(1)

    def grpc_addr(self) -> str:
        """The gRPC port's host:port, once xserve logged it."""
        return self._wait(GRPC_RE)

    @property
    def log(self) -> str:
        with self._seen:
            return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.cache, ignore_errors=True)


@pytest.fixture(scope="session")
def binary(tmp_path_factory: pytest.TempPathFactory) -> str:
    return xserve_binary(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def tinycnn_repo(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    repo = tmp_path_factory.mktemp("repo")
    (repo / "tinycnn" / "1").mkdir(parents=True)
    shutil.copy(ROOT / "examples/models/tinycnn/1/model.onnx", repo / "tinycnn/1/model.onnx")
    (repo / "tinycnn" / "config.yaml").write_text("buckets:\n  batch: [1, 2, 4, 8]\nwarmup: lazy\n")
    return repo


@pytest.fixture(scope="session")
def server(binary: str, tinycnn_repo: pathlib.Path) -> Iterator[Xserve]:
    s = Xserve(binary, tinycnn_repo)
    try:
        yield s
    finally:
        s.stop()


# The generative model the text-generation tests serve (make gen-models).
GEN = ROOT / ".cache" / "gen"
GEN_MODEL = "llama-pt2"


@pytest.fixture(scope="session")
def gen_refs() -> dict:
    """transformers' greedy generations and the tokenizer's decodes for GEN_MODEL (refs.json)."""
    path = GEN / "refs.json"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make gen-models` (make test does)")
    return json.loads(path.read_text())["chat"]


@pytest.fixture(scope="session")
def gen_served(binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Xserve]:
    """xserve serving GEN_MODEL with its tokenizer, every step program compiled at load."""
    repo = tmp_path_factory.mktemp("gen-repo")
    shutil.copytree(GEN / "repo" / GEN_MODEL, repo / GEN_MODEL)
    cfg = repo / GEN_MODEL / "config.yaml"
    cfg.write_text(cfg.read_text() + "warmup: eager\n")
    s = Xserve(binary, repo)
    try:
        yield s
    finally:
        s.stop()


def gen_metric(url: str, name: str, **labels: str) -> float:
    """The value of a series of GEN_MODEL's in /metrics (0 when absent)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    want = [f'model="{GEN_MODEL}"'] + [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if line.startswith(name + "{") and all(w in line for w in want):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
