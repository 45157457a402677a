"""HTTP clients: Client (blocking, http.client) and AsyncClient (asyncio streams).

Both build the same requests and read the same answers (``_Endpoints``); they
differ only in the transport, one kept-alive HTTP/1.1 connection per thread
for Client and a pool of asyncio connections for AsyncClient.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import http.client
import json
import ssl
import threading
import urllib.parse
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from ._wire import HEADER_LENGTH, decode_response, encode_request, error_message
from .errors import XserveError

T = TypeVar("T")
Response = tuple[int, dict[str, str], bytes]  # status, headers (lower-case names), body


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _model_path(model: str, version: int | str | None) -> str:
    path = f"/v2/models/{_quote(model)}"
    if version is not None:
        path += f"/versions/{_quote(str(version))}"
    return path


@dataclasses.dataclass
class _Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    body: bytes | None
    headers: dict[str, str]
    parse: Callable[[Response], T]


def _json_answer(r: Response) -> Any:
    status, _, data = r
    if status >= 400:
        raise XserveError(status, error_message(data))
    return json.loads(data) if data.strip() else None


def _ok(r: Response) -> bool:
    return r[0] == 200


def _config_answer(r: Response) -> dict[str, Any] | None:
    status, _, data = r
    if status == 404 and "no route" in error_message(data):
        return None
    return _json_answer(r)


def _infer_answer(r: Response) -> dict[str, np.ndarray]:
    status, h, data = r
    if status >= 400:
        raise XserveError(status, error_message(data))
    length = h.get(HEADER_LENGTH.lower())
    return decode_response(data, int(length) if length is not None else None)


def _json_call(method: str, path: str, doc: Any = None, parse: Callable[[Response], Any] = _json_answer) -> _Call[Any]:
    body = None if doc is None else json.dumps(doc).encode()
    return _Call(method, path, body, {"Content-Type": "application/json"} if body is not None else {}, parse)


class _Endpoints:
    """The requests of the API, shared by Client and AsyncClient."""

    def __init__(
        self,
        url: str,
        token: str | None,
        timeout: float,
        ca_file: str | None,
        cert_file: str | None,
        key_file: str | None,
        insecure: bool,
    ) -> None:
        if "://" not in url:
            url = "http://" + url
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"xserve: url {url!r}: want http://host:port or https://host:port")
        self.url = url.rstrip("/")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        self._timeout = timeout
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._ssl: ssl.SSLContext | None = None
        if self._https:
            ctx = ssl.create_default_context(cafile=ca_file)
            if cert_file:
                ctx.load_cert_chain(cert_file, key_file)
            if insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx

    def _headers_for(self, call: _Call[Any]) -> dict[str, str]:
        h = dict(self._headers)
        h.update(call.headers)
        return h

    def _unreachable(self, call: _Call[Any], e: BaseException) -> XserveError:
        return XserveError(0, f"{call.method} {self.url}{call.path}: {e or type(e).__name__}")

    @staticmethod
    def _live() -> _Call[bool]:
        return _Call("GET", "/v2/health/live", None, {}, _ok)

    @staticmethod
    def _ready() -> _Call[bool]:
        return _Call("GET", "/v2/health/ready", None, {}, _ok)

    @staticmethod
    def _model_ready(model: str, version: int | str | None) -> _Call[bool]:
        return _Call("GET", _model_path(model, version) + "/ready", None, {}, _ok)

    @staticmethod
    def _load(model: str, files: Mapping[str, bytes] | None, config: Mapping[str, Any] | None) -> _Call[Any]:
        params: dict[str, Any] = {}
        for path, data in (files or {}).items():
            params["file:" + path] = base64.b64encode(data).decode()
        if config is not None:
            params["config"] = json.dumps(config)
        return _json_call("POST", f"/v2/repository/models/{_quote(model)}/load", {"parameters": params} if params else None)

    @staticmethod
    def _infer(
        model: str,
        inputs: Mapping[str, Any],
        version: int | str | None,
        outputs: Sequence[str] | None,
        request_id: str | None,
        timeout_us: int | None,
        sequence: tuple[int | str, bool, bool] | None = None,
    ) -> _Call[dict[str, np.ndarray]]:
        params: dict[str, Any] = {"timeout": timeout_us} if timeout_us is not None else {}
        if sequence is not None:
            params.update(sequence_id=sequence[0], sequence_start=sequence[1], sequence_end=sequence[2])
        body, n = encode_request(inputs, outputs, request_id, params or None)
        headers = {HEADER_LENGTH: str(n), "Content-Type": "application/octet-stream"}
        return _Call("POST", _model_path(model, version) + "/infer", body, headers, _infer_answer)


class Client(_Endpoints):
    """A blocking client for xserve's HTTP API (Open Inference Protocol v2).

    ``url`` is ``http://host:port`` or ``https://host:port``. ``token`` is sent
    as ``Authorization: Bearer <token>``. For TLS, ``ca_file`` names the CA
    of the server's certificate (default: the system's), ``cert_file`` and
    ``key_file`` a client certificate, and ``insecure=True`` skips
    verification (tests only). One connection per thread is kept alive, so a
    Client may be shared by threads.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        token: str | None = None,
        timeout: float = 60.0,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        insecure: bool = False,
    ) -> None:
        super().__init__(url, token, timeout, ca_file, cert_file, key_file, insecure)
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"xserve.Client({self.url!r})"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes this thread's connection (others close when collected)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._ssl)
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
        return conn

    def _do(self, call: _Call[T]) -> T:
        """One request; a kept-alive connection the server closed is retried once."""
        headers = self._headers_for(call)
        for attempt in (0, 1):
            conn = self._conn()
            fresh = conn.sock is None
            try:
                conn.request(call.method, self._prefix + call.path, body=call.body, headers=headers)
                res = conn.getresponse()
                data = res.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                if attempt == 0 and not fresh:
                    continue
                raise self._unreachable(call, e) from e
            except OSError as e:
                self.close()
                raise self._unreachable(call, e) from e
            if res.getheader("Connection", "").lower() == "close":
                self.close()
            return call.parse((res.status, {k.lower(): v for k, v in res.getheaders()}, data))
        raise AssertionError("unreachable")

    # ---- health and metadata

    def server_live(self) -> bool:
        """Whether the server process answers (GET /v2/health/live)."""
        return self._do(self._live())

    def server_ready(self) -> bool:
        """Whether every model that should load has loaded (GET /v2/health/ready)."""
        return self._do(self._ready())

    def model_ready(self, model: str, version: int | str | None = None) -> bool:
        """Whether model (version) can take requests; False for unknown models."""
        return self._do(self._model_ready(model, version))

    def server_metadata(self) -> dict[str, Any]:
        """The server's name, version and protocol extensions (GET /v2)."""
        return self._do(_json_call("GET", "/v2"))

    def metadata(self, model: str, version: int | str | None = None) -> dict[str, Any]:
        """The model's inputs, outputs, platform, versions and symbols."""
        return self._do(_json_call("GET", _model_path(model, version)))

    def config(self, model: str, version: int | str | None = None) -> dict[str, Any] | None:
        """The model's configuration (Triton's model configuration extension).

        Returns None when the server does not offer the extension (a 404 that
        names no model); an unknown model raises XserveError(404).
        """
        return self._do(_json_call("GET", _model_path(model, version) + "/config", parse=_config_answer))

    # ---- repository

    def index(self, ready: bool = False) -> list[dict[str, Any]]:
        """Every model version the server knows: name, version, state, reason."""
        return self._do(_json_call("POST", "/v2/repository/index", {"ready": True} if ready else None)) or []

    def load(self, model: str, *, files: Mapping[str, bytes] | None = None, config: Mapping[str, Any] | None = None) -> None:
        """(Re)loads model from the repository, and waits until it is done.

        With ``files`` (paths inside the model's directory, such as
        ``"1/model.pt2"``, mapped to their bytes) and ``config`` (the
        config.yaml content as a dict), uploads the model instead, as Triton's
        load request with file overrides does (docs/HTTP.md).
        """
        self._do(self._load(model, files, config))

    def unload(self, model: str) -> None:
        """Unloads model once its in-flight requests finished."""
        self._do(_json_call("POST", f"/v2/repository/models/{_quote(model)}/unload"))

    # ---- inference

    def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        version: int | str | None = None,
        outputs: Sequence[str] | None = None,
        *,
        request_id: str | None = None,
        timeout_us: int | None = None,
        sequence_id: int | str | None = None,
        start: bool = False,
        end: bool = False,
    ) -> dict[str, np.ndarray]:
        """Runs model on inputs (name -> array) and returns its outputs by name.

        Tensors travel in the binary tensor extension both ways. ``outputs``
        restricts the answer to those names; ``timeout_us`` is the request's
        deadline on the server in microseconds. For a stateful model,
        ``sequence_id`` makes the request a step of that sequence (the server
        keeps the model's state between steps; don't send the state inputs):
        ``start`` on its first step, ``end`` on its last.
        """
        seq = (sequence_id, start, end) if sequence_id is not None else None
        return self._do(self._infer(model, inputs, version, outputs, request_id, timeout_us, seq))

    def stream(
        self,
        model: str,
        chunks: Iterable[np.ndarray],
        sequence_id: int | str,
        *,
        input: str = "input",
        inputs: Mapping[str, Any] | None = None,
        version: int | str | None = None,
        outputs: Sequence[str] | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Streams chunks (e.g. 512-sample windows of 16 kHz audio for
        silero-vad, each shaped as the model's ``input``) through a stateful
        model as one sequence, yielding each chunk's outputs in turn. The
        sequence starts with the first chunk and ends with the last;
        ``inputs`` are sent with every chunk (silero-vad's ``sr``).
        """
        it = iter(chunks)
        try:
            cur = next(it)
        except StopIteration:
            return
        first = True
        while True:
            try:
                nxt = next(it)
                last = False
            except StopIteration:
                last = True
            feed = dict(inputs or {})
            feed[input] = cur
            yield self.infer(model, feed, version, outputs, sequence_id=sequence_id, start=first, end=last)
            if last:
                return
            cur, first = nxt, False

    # ---- text generation (a generative model: docs/GENERATE.md)

    def generate(self, model: str, prompt: str, version: int | str | None = None, *, stream: bool = False,
                 **params: Any) -> str | Iterator[str]:
        """Generates text from prompt: the whole text, or with ``stream=True`` an
        iterator over its pieces as they come (KServe's generate extension,
        ``generate`` / ``generate_stream``). ``params`` are the sampling
        parameters by their OpenAI names (``max_tokens``, ``temperature``,
        ``top_p``, ``top_k``, ``seed``, ``stop``, ...). Closing the iterator
        before its end ends the sequence on the server.
        """
        path = _model_path(model, version) + ("/generate_stream" if stream else "/generate")
        doc = {"text_input": prompt, "parameters": params}
        if not stream:
            return str(self._do(_json_call("POST", path, doc))["text_output"])
        return self._generate_stream(path, json.dumps(doc).encode())

    def _generate_stream(self, path: str, body: bytes) -> Iterator[str]:
        # A connection of its own: closing it is how the server learns that
        # the client stopped reading.
        if self._https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            conn.request("POST", self._prefix + path, body=body, headers=headers)
            res = conn.getresponse()
            if res.status != 200:
                raise XserveError(res.status, error_message(res.read()))
            for line in res:
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[len(b"data: "):])
                if "error" in event:
                    raise XserveError(500, str(event["error"]))
                if event.get("text_output"):
                    yield event["text_output"]
                if event.get("finish_reason"):
                    return
        except OSError as e:
            raise XserveError(0, f"{self.url}{path}: {e}") from e
        finally:
            conn.close()


_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class AsyncClient(_Endpoints):
    """The asyncio form of Client: the same options and methods, awaitable.

    It speaks HTTP/1.1 over asyncio streams (no threads), keeping up to
    ``max_connections`` idle connections alive; concurrent calls each take a
    connection of their own.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        token: str | None = None,
        timeout: float = 60.0,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        insecure: bool = False,
        max_connections: int = 16,
    ) -> None:
        super().__init__(url, token, timeout, ca_file, cert_file, key_file, insecure)
        self._idle: list[_Stream] = []
        self._max_idle = max_connections

    def __repr__(self) -> str:
        return f"xserve.AsyncClient({self.url!r})"

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the idle connections."""
        idle, self._idle = self._idle, []
        for _, w in idle:
            w.close()
        for _, w in idle:
            try:
                await w.wait_closed()
            except OSError:
                pass

    async def _exchange(self, s: _Stream, call: _Call[Any]) -> tuple[Response, bool]:
        reader, writer = s
        body = call.body or b""
        host = self._host if self._port in (80, 443) else f"{self._host}:{self._port}"
        lines = [f"{call.method} {self._prefix + call.path} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in self._headers_for(call).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionResetError("the server closed the connection")
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise XserveError(0, f"{call.method} {self.url}{call.path}: not an HTTP answer: {status_line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        keep = headers.get("connection", "").lower() != "close" and parts[0] == "HTTP/1.1"
        if "content-length" in headers:
            data = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            data = b"".join(chunks)
        elif call.method == "HEAD" or status in (204, 304):
            data = b""
        else:
            data, keep = await reader.read(), False
        return (status, headers, data), keep

    async def _do(self, call: _Call[T]) -> T:
        """One request; an idle connection the server closed meanwhile is retried once on a new one."""
        for attempt in (0, 1):
            reused = bool(self._idle)
            try:
                s = self._idle.pop() if reused else await asyncio.wait_for(
                    asyncio.open_connection(self._host, self._port, ssl=self._ssl), self._timeout)
            except (OSError, asyncio.TimeoutError) as e:
                raise self._unreachable(call, e) from e
            try:
                response, keep = await asyncio.wait_for(self._exchange(s, call), self._timeout)
            except (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError) as e:
                s[1].close()
                if attempt == 0 and reused:
                    continue
                raise self._unreachable(call, e) from e
            except (OSError, asyncio.TimeoutError) as e:
                s[1].close()
                raise self._unreachable(call, e) from e
            except BaseException:
                s[1].close()
                raise
            if keep and len(self._idle) < self._max_idle:
                self._idle.append(s)
            else:
                s[1].close()
            return call.parse(response)
        raise AssertionError("unreachable")

    async def server_live(self) -> bool:
        return await self._do(self._live())

    async def server_ready(self) -> bool:
        return await self._do(self._ready())

    async def model_ready(self, model: str, version: int | str | None = None) -> bool:
        return await self._do(self._model_ready(model, version))

    async def server_metadata(self) -> dict[str, Any]:
        return await self._do(_json_call("GET", "/v2"))

    async def metadata(self, model: str, version: int | str | None = None) -> dict[str, Any]:
        return await self._do(_json_call("GET", _model_path(model, version)))

    async def config(self, model: str, version: int | str | None = None) -> dict[str, Any] | None:
        return await self._do(_json_call("GET", _model_path(model, version) + "/config", parse=_config_answer))

    async def index(self, ready: bool = False) -> list[dict[str, Any]]:
        return await self._do(_json_call("POST", "/v2/repository/index", {"ready": True} if ready else None)) or []

    async def load(self, model: str, *, files: Mapping[str, bytes] | None = None, config: Mapping[str, Any] | None = None) -> None:
        await self._do(self._load(model, files, config))

    async def unload(self, model: str) -> None:
        await self._do(_json_call("POST", f"/v2/repository/models/{_quote(model)}/unload"))

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        version: int | str | None = None,
        outputs: Sequence[str] | None = None,
        *,
        request_id: str | None = None,
        timeout_us: int | None = None,
        sequence_id: int | str | None = None,
        start: bool = False,
        end: bool = False,
    ) -> dict[str, np.ndarray]:
        seq = (sequence_id, start, end) if sequence_id is not None else None
        return await self._do(self._infer(model, inputs, version, outputs, request_id, timeout_us, seq))
