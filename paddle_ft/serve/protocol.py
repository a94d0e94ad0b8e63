"""uvicorn's h11 connection protocol plus a deadline for the request head.

uvicorn closes a connection that sits idle between requests (its keep-alive timeout), but not one that
sends its headers a byte at a time: 200 such slow clients hold 200 connections open forever. Here a
client must complete its request line and headers within `head_timeout` seconds of connecting, or of
the end of its previous response; otherwise the connection is closed. (The body has its own deadline,
enforced by the app's body reader.)
"""
from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def protocol_with_head_timeout(head_timeout: float) -> type[asyncio.Protocol]:
    """An H11Protocol class with the given deadline, for `uvicorn.Config(http=...)`."""
    return type("HeadTimeoutH11Protocol", (_HeadTimeoutH11Protocol,), {"head_timeout": head_timeout})


class _HeadTimeoutH11Protocol(H11Protocol):
    head_timeout: float = 10.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_deadline = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the request head is complete (or the connection is over)
            self._cancel_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._cancel_head_deadline()
            self._head_deadline = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def connection_lost(self, exc) -> None:
        self._cancel_head_deadline()
        super().connection_lost(exc)

    def _cancel_head_deadline(self) -> None:
        deadline = getattr(self, "_head_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
