"""Errors raised by the xserve clients."""

from __future__ import annotations


class XserveError(Exception):
    """An error answer from xserve, or a failure to reach it.

    ``status`` is the HTTP status the server answered (NATS replies carry the
    same code in their ``Xserve-Error`` header); 0 when no answer came.
    ``message`` is the server's own message, unchanged.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"xserve: {status}: {message}" if status else f"xserve: {message}")
        self.status = status
        self.message = message

    @property
    def temporary(self) -> bool:
        """Whether retrying the same request may succeed (429, 503, 504)."""
        return self.status in (429, 503, 504)
