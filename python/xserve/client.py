"""HTTP clients: Client (blocking) and AsyncClient (asyncio)."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import ssl
import threading
import urllib.parse
from typing import Any, Mapping, Sequence

import numpy as np

from ._wire import HEADER_LENGTH, decode_response, encode_request, error_message
from .errors import XserveError


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _model_path(model: str, version: int | str | None) -> str:
    path = f"/v2/models/{_quote(model)}"
    if version is not None:
        path += f"/versions/{_quote(str(version))}"
    return path


class Client:
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

    def _request(
        self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """One request; a kept-alive connection the server closed is retried once."""
        h = dict(self._headers)
        if headers:
            h.update(headers)
        if body is not None and "Content-Type" not in h:
            h["Content-Type"] = "application/json"
        for attempt in (0, 1):
            conn = self._conn()
            fresh = conn.sock is None
            try:
                conn.request(method, self._prefix + path, body=body, headers=h)
                res = conn.getresponse()
                data = res.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.close()
                if attempt == 0 and not fresh:
                    continue
                raise XserveError(0, f"{method} {self.url}{path}: {e}") from e
            except OSError as e:
                self.close()
                raise XserveError(0, f"{method} {self.url}{path}: {e}") from e
            if res.getheader("Connection", "").lower() == "close":
                self.close()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, data
        raise AssertionError("unreachable")

    def _call(self, method: str, path: str, doc: Any = None) -> Any:
        body = None if doc is None else json.dumps(doc).encode()
        status, _, data = self._request(method, path, body)
        if status >= 400:
            raise XserveError(status, error_message(data))
        return json.loads(data) if data.strip() else None

    # ---- health and metadata

    def server_live(self) -> bool:
        """Whether the server process answers (GET /v2/health/live)."""
        return self._request("GET", "/v2/health/live")[0] == 200

    def server_ready(self) -> bool:
        """Whether every model that should load has loaded (GET /v2/health/ready)."""
        return self._request("GET", "/v2/health/ready")[0] == 200

    def model_ready(self, model: str, version: int | str | None = None) -> bool:
        """Whether model (version) can take requests; False for unknown models."""
        return self._request("GET", _model_path(model, version) + "/ready")[0] == 200

    def server_metadata(self) -> dict[str, Any]:
        """The server's name, version and protocol extensions (GET /v2)."""
        return self._call("GET", "/v2")

    def metadata(self, model: str, version: int | str | None = None) -> dict[str, Any]:
        """The model's inputs, outputs, platform, versions and symbols."""
        return self._call("GET", _model_path(model, version))

    def config(self, model: str, version: int | str | None = None) -> dict[str, Any] | None:
        """The model's configuration (Triton's model configuration extension).

        Returns None when the server does not offer the extension (a 404 that
        names no model); an unknown model raises XserveError(404).
        """
        status, _, data = self._request("GET", _model_path(model, version) + "/config")
        if status == 404 and "no route" in error_message(data):
            return None
        if status >= 400:
            raise XserveError(status, error_message(data))
        return json.loads(data)

    # ---- repository

    def index(self, ready: bool = False) -> list[dict[str, Any]]:
        """Every model version the server knows: name, version, state, reason."""
        return self._call("POST", "/v2/repository/index", {"ready": True} if ready else None) or []

    def load(
        self,
        model: str,
        *,
        files: Mapping[str, bytes] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """(Re)loads model from the repository, and waits until it is done.

        With ``files`` (paths inside the model's directory, such as
        ``"1/model.pt2"``, mapped to their bytes) and ``config`` (the
        config.yaml content as a dict), uploads the model instead, as Triton's
        load request with file overrides does.
        """
        params: dict[str, Any] = {}
        for path, data in (files or {}).items():
            params["file:" + path] = base64.b64encode(data).decode()
        if config is not None:
            params["config"] = json.dumps(config)
        self._call("POST", f"/v2/repository/models/{_quote(model)}/load", {"parameters": params} if params else None)

    def unload(self, model: str) -> None:
        """Unloads model once its in-flight requests finished."""
        self._call("POST", f"/v2/repository/models/{_quote(model)}/unload")

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
    ) -> dict[str, np.ndarray]:
        """Runs model on inputs (name -> array) and returns its outputs by name.

        Tensors travel in the binary tensor extension both ways. ``outputs``
        restricts the answer to those names; ``timeout_us`` is the request's
        deadline on the server in microseconds.
        """
        params = {"timeout": timeout_us} if timeout_us is not None else None
        body, n = encode_request(inputs, outputs, request_id, params)
        headers = {HEADER_LENGTH: str(n), "Content-Type": "application/octet-stream"}
        status, h, data = self._request("POST", _model_path(model, version) + "/infer", body, headers)
        if status >= 400:
            raise XserveError(status, error_message(data))
        length = h.get(HEADER_LENGTH.lower())
        return decode_response(data, int(length) if length is not None else None)


class AsyncClient:
    """The asyncio form of Client: the same methods, awaitable.

    Each call runs the blocking client in a worker thread (asyncio.to_thread),
    with one kept-alive connection per thread, so concurrent calls do not
    block the event loop or each other.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", **kwargs: Any) -> None:
        self._c = Client(url, **kwargs)
        self.url = self._c.url

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._c.close()

    async def server_live(self) -> bool:
        return await asyncio.to_thread(self._c.server_live)

    async def server_ready(self) -> bool:
        return await asyncio.to_thread(self._c.server_ready)

    async def model_ready(self, model: str, version: int | str | None = None) -> bool:
        return await asyncio.to_thread(self._c.model_ready, model, version)

    async def server_metadata(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._c.server_metadata)

    async def metadata(self, model: str, version: int | str | None = None) -> dict[str, Any]:
        return await asyncio.to_thread(self._c.metadata, model, version)

    async def config(self, model: str, version: int | str | None = None) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._c.config, model, version)

    async def index(self, ready: bool = False) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._c.index, ready)

    async def load(self, model: str, **kwargs: Any) -> None:
        await asyncio.to_thread(self._c.load, model, **kwargs)

    async def unload(self, model: str) -> None:
        await asyncio.to_thread(self._c.unload, model)

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        version: int | str | None = None,
        outputs: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, np.ndarray]:
        return await asyncio.to_thread(self._c.infer, model, inputs, version, outputs, **kwargs)
