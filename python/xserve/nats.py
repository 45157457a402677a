"""NATS clients: AsyncNatsClient (asyncio, nats-py) and NatsClient (blocking).

Requests go to ``<prefix>.infer.<model>`` (default ``xserve.v1.infer.<model>``)
as Open Inference Protocol bodies with the binary tensor extension
(``Xserve-Protocol: v2``); docs/NATS.md describes the subjects and headers.
Needs the ``nats`` extra: ``pip install 'xserve[nats]'``.
"""

from __future__ import annotations

import os

import asyncio
import threading
import json
from typing import Any, AsyncGenerator, Coroutine, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from ._wire import HEADER_LENGTH, decode_response, encode_request, error_message
from .errors import XserveError

T = TypeVar("T")


def _import_nats() -> Any:
    try:
        import nats  # type: ignore[import-not-found]
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("xserve: NatsClient needs nats-py: pip install 'xserve[nats]'") from e
    return nats


def inbox_prefix(seed_file: str) -> str:
    """The inbox prefix of the embedded server's user whose NKey seed is in
    seed_file: _INBOX.<its public key>, the only inboxes it may read."""
    import nkeys  # type: ignore[import-not-found]

    with open(seed_file, "rb") as f:
        kp = nkeys.from_seed(bytearray(f.read().strip()))
    return "_INBOX." + kp.public_key.decode()


class AsyncNatsClient:
    """Inference over NATS request-reply, for asyncio.

    Create it with ``await AsyncNatsClient.connect("nats://127.0.0.1:4222")``.
    Authentication: ``creds`` (a credentials file), ``token``, or ``user`` and
    ``password``; TLS: ``tls_ca``, ``tls_cert``, ``tls_key``.
    """

    def __init__(self, nc: Any, prefix: str = "xserve.v1", timeout: float = 30.0) -> None:
        self._nc = nc
        self.prefix = prefix
        self.timeout = timeout
        # (model, sequence id) -> the subject of the replica holding the
        # sequence's state (the Xserve-Sequence-Subject of its replies).
        self._sticky: dict[tuple[str, str], str] = {}

    @classmethod
    async def connect(
        cls,
        url: str = "nats://127.0.0.1:4222",
        *,
        prefix: str = "xserve.v1",
        timeout: float = 30.0,
        creds: str | None = None,
        token: str | None = None,
        user: str | None = None,
        password: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        nkey: str | None = None,
    ) -> "AsyncNatsClient":
        nats = _import_nats()
        opts: dict[str, Any] = {"servers": url.split(","), "max_reconnect_attempts": 3, "connect_timeout": 5}
        nkey = nkey or os.environ.get("XSERVE_NATS_NKEY")
        if nkey:
            # The embedded NATS server of `xserve serve` takes only its own
            # users: its client seed file is in the log (client_nkey=...).
            # Each user may read only its own inbox, _INBOX.<public key>.
            opts["nkeys_seed"] = nkey
            opts["inbox_prefix"] = inbox_prefix(nkey)
        if creds:
            opts["user_credentials"] = creds
        if token:
            opts["token"] = token
        if user:
            opts["user"], opts["password"] = user, password
        if tls_ca or tls_cert:
            import ssl

            ctx = ssl.create_default_context(cafile=tls_ca)
            if tls_cert:
                ctx.load_cert_chain(tls_cert, tls_key)
            opts["tls"] = ctx
        try:
            nc = await nats.connect(**opts)
        except Exception as e:
            raise XserveError(0, f"connecting to NATS at {url}: {e}") from e
        return cls(nc, prefix, timeout)

    async def close(self) -> None:
        await self._nc.drain()

    async def __aenter__(self) -> "AsyncNatsClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        version: int | str | None = None,
        outputs: Sequence[str] | None = None,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        sequence_id: int | str | None = None,
        start: bool = False,
        end: bool = False,
    ) -> dict[str, np.ndarray]:
        """Runs model on inputs and returns its outputs by name (see Client.infer).

        ``sequence_id`` makes the request a step of that sequence of a
        stateful model (``start`` on its first step, ``end`` on its last):
        the first step goes to any replica, the later ones to the replica
        holding the sequence's state, which its replies name. When that
        replica is gone, the step raises XserveError(410): the state is
        lost, and the sequence must start again."""
        body, n = encode_request(inputs, outputs, request_id)
        headers = {"Xserve-Protocol": "v2", HEADER_LENGTH: str(n)}
        if version is not None:
            headers["Xserve-Model-Version"] = str(version)
        if request_id is not None:
            headers["X-Request-Id"] = request_id
        key = (model, str(sequence_id)) if sequence_id is not None else None
        subject = f"{self.prefix}.infer.{model}"
        sticky = False
        if key is not None:
            headers.update({"Xserve-Sequence-Id": key[1], "Xserve-Sequence-Start": str(start).lower(),
                            "Xserve-Sequence-End": str(end).lower()})
            if start:
                self._sticky.pop(key, None)
            elif key in self._sticky:
                subject, sticky = self._sticky[key], True
        wait = self.timeout if timeout is None else timeout
        headers["Xserve-Timeout"] = f"{int(wait * 1000)}ms"
        nats = _import_nats()
        try:
            msg = await self._nc.request(subject, body, timeout=wait, headers=headers)
        except nats.errors.NoRespondersError:
            if key is not None:
                self._sticky.pop(key, None)
            if sticky:
                raise XserveError(410, f"sequence {str(sequence_id)!r} of model {model}: no replica answers on {subject}; "
                                       "the sequence's state is lost: start it again (start=True)") from None
            raise XserveError(404, f"no replica is subscribed to {subject}") from None
        except nats.errors.TimeoutError:
            raise XserveError(504, f"no reply on {subject} within {wait}s") from None
        h = msg.headers or {}
        if key is not None:
            to = h.get("Xserve-Sequence-Subject")
            if to and not end and "Xserve-Error" not in h:
                self._sticky[key] = to
            else:
                self._sticky.pop(key, None)
        if "Xserve-Error" in h:
            message = error_message(msg.data) or h.get("Xserve-Error-Message", "")
            raise XserveError(int(h["Xserve-Error"]), message)
        length = h.get(HEADER_LENGTH)
        return decode_response(msg.data, int(length) if length is not None else None)

    async def generate(self, model: str, prompt: str, version: int | str | None = None, *, timeout: float | None = None,
                       **params: Any) -> AsyncGenerator[str, None]:
        """Generates text from prompt on ``<prefix>.generate.<model>``: the pieces
        of text as they come (docs/NATS.md, "Text generation, streamed").
        ``params`` are the sampling parameters by their OpenAI names;
        ``timeout`` bounds the wait for each message. Stopping the iteration
        early unsubscribes, and the replica then ends the sequence.
        """
        nats = _import_nats()
        subject = f"{self.prefix}.generate.{model}"
        inbox = self._nc.new_inbox()
        sub = await self._nc.subscribe(inbox)
        wait = self.timeout if timeout is None else timeout
        headers = {"Xserve-Model-Version": str(version)} if version is not None else None
        try:
            await self._nc.publish(subject, json.dumps({"text_input": prompt, "parameters": params}).encode(), reply=inbox, headers=headers)
            while True:
                try:
                    msg = await sub.next_msg(timeout=wait)
                except nats.errors.NoRespondersError:
                    raise XserveError(404, f"no replica is subscribed to {subject}") from None
                except nats.errors.TimeoutError:
                    raise XserveError(504, f"no message on {subject}'s reply subject within {wait}s") from None
                h = msg.headers or {}
                kind = h.get("Xserve-Stream")
                if kind == "probe":
                    continue
                if "Xserve-Error" in h:
                    raise XserveError(int(h["Xserve-Error"]), error_message(msg.data) or h.get("Xserve-Error-Message", ""))
                text = json.loads(msg.data).get("text_output", "")
                if text:
                    yield text
                if kind == "end":
                    return
        finally:
            await sub.unsubscribe()


class NatsClient:
    """The blocking form of AsyncNatsClient: ``NatsClient("nats://host:4222")``.

    It runs its own event loop in a background thread; the keyword arguments
    are AsyncNatsClient.connect's.
    """

    def __init__(self, url: str = "nats://127.0.0.1:4222", **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="xserve-nats", daemon=True)
        self._thread.start()
        try:
            self._c: AsyncNatsClient = self._run(AsyncNatsClient.connect(url, **kwargs))
        except BaseException:
            self._stop()
            raise
        self.url = url

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        """Drains the connection and stops the background loop."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._c.close())
        finally:
            self._stop()

    def __enter__(self) -> "NatsClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def infer(
        self,
        model: str,
        inputs: Mapping[str, Any],
        version: int | str | None = None,
        outputs: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, np.ndarray]:
        """Runs model on inputs and returns its outputs by name (see Client.infer)."""
        return self._run(self._c.infer(model, inputs, version, outputs, **kwargs))

    def generate(self, model: str, prompt: str, version: int | str | None = None, *, stream: bool = False,
                 **params: Any) -> str | Iterator[str]:
        """Generates text (see AsyncNatsClient.generate): the whole text, or with
        ``stream=True`` an iterator over its pieces as they come."""
        pieces = self._c.generate(model, prompt, version, **params)
        if not stream:
            async def join() -> str:
                return "".join([p async for p in pieces])
            return self._run(join())
        return self._iterate(pieces)

    def _iterate(self, pieces: AsyncGenerator[str, None]) -> Iterator[str]:
        try:
            while True:
                try:
                    yield self._run(pieces.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(pieces.aclose())
