"""The HTTP connection: uvicorn's httptools protocol with the bounds a server reachable from a
network needs and uvicorn does not set. The request head (request line and headers) is limited in
bytes and in count (431), it must arrive within a deadline from its first byte, and while a body
is being received the client may not pause longer than an idle limit (408; the connection then
closes). Without them a client that never finishes its request holds a connection and whatever
it sent for as long as it likes (an 8 MB header, 20,000 headers, or a few bytes a minute).

A connection closed while its client is still sending (a 401 before the body, a 431) closes
gracefully, as nginx's lingering close does: the answer is sent and the server's side shut, then
what still arrives is read and dropped for up to LINGER_S. Closed at once, the kernel would reset
the connection and the client could lose the answer with the data it had not sent yet."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from .errors import error_body

LINGER_S = 2.0


@dataclass(frozen=True)
class ConnectionLimits:
    max_head_bytes: int = 64 * 1024
    max_headers: int = 100
    head_timeout_s: float = 10.0  # the whole request head, from its first byte (or from the connection)
    body_timeout_s: float = 30.0  # the longest pause while a body comes in


def bounded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn's `http` setting, with these limits."""
    return type("BoundedHttpProtocol", (BoundedHttpProtocol,), {"limits": limits})


class _ClosingGracefully:
    """The connection's transport as uvicorn sees it: its close() is the protocol's graceful one."""

    def __init__(self, transport: Any, protocol: BoundedHttpProtocol):
        self.raw = transport
        self._protocol = protocol

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def close(self) -> None:
        self._protocol.close_gracefully()

    def is_closing(self) -> bool:
        return self._protocol.lingering or self.raw.is_closing()


class BoundedHttpProtocol(HttpToolsProtocol):
    limits = ConnectionLimits()

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._in_head = True  # receiving a request head (or waiting for the next one)
        self._head_bytes = 0
        self._header_count = 0
        self._head_timer: Any = None
        self._body_timer: Any = None
        self._body_seen = 0.0  # loop time of the last body bytes
        self._body_incoming = False  # a request's head is in and its body is not
        self._refused = False
        self.lingering = False

    # -- connection ------------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        super().connection_made(_ClosingGracefully(transport, self))  # pyright: ignore[reportArgumentType]  (a Transport, wrapped)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self.lingering:  # dropped unread
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        # A head still incomplete past the limit: refused before more of it is buffered.
        if self._in_head and not self._refused and self._head_bytes > self.limits.max_head_bytes:
            self._refuse(431, f"the request head is over {self.limits.max_head_bytes} bytes (--max-header-bytes)")

    # -- parser callbacks ------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._refused:
            return
        self._in_head = True
        self._header_count = 0
        if self._head_timer is None:
            self._arm_head_timer()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._refused:
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            return self._refuse(431, f"the request has over {self.limits.max_headers} headers (--max-headers)")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        self._head_bytes = 0
        self._cancel(head=True)
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
        if size > self.limits.max_head_bytes:
            return self._refuse(431, f"the request head is over {self.limits.max_head_bytes} bytes (--max-header-bytes)")
        if any((n == b"content-length" and v.strip() not in (b"", b"0")) or n == b"transfer-encoding" for n, v in self.headers):
            self._body_incoming = True
            self._body_seen = self.loop.time()
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_deadline)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            self._body_seen = self.loop.time()
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._cancel(body=True)
        self._body_incoming = False
        self._in_head = True  # what comes next on this connection is the next request's head
        super().on_message_complete()

    # -- deadlines -------------------------------------------------------------------------------
    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_deadline)

    def _head_deadline(self) -> None:
        self._head_timer = None
        if not self._in_head:
            return
        if self._head_bytes == 0:  # nothing sent yet: close quietly (a 408 could pass for the answer to a request sent now)
            self._refused = True
            cast(_ClosingGracefully, self.transport).raw.close()
            return
        self._refuse(408, f"the request head did not arrive within {self.limits.head_timeout_s:g} s (--header-timeout)")

    def _body_deadline(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        idle = self.loop.time() - self._body_seen
        # Not the client's fault: the app has not read what came (flow control holds the rest back),
        # it has not asked for the body yet (Expect: 100-continue), or it has answered already.
        waiting_on_us = self.flow.read_paused or cycle is None or cycle.waiting_for_100_continue or cycle.response_started
        if waiting_on_us or idle < self.limits.body_timeout_s:
            if waiting_on_us:
                self._body_seen = self.loop.time()
            wait = self.limits.body_timeout_s - (self.loop.time() - self._body_seen)
            self._body_timer = self.loop.call_later(max(wait, 0.01), self._body_deadline)
            return
        self._refuse(408, f"the request body stopped arriving for {self.limits.body_timeout_s:g} s (--body-timeout)")

    def _cancel(self, head: bool = False, body: bool = False) -> None:
        if head and self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if body and self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel(head=True, body=True)

    def _refuse(self, status: int, message: str) -> None:
        """Answers `status` (unless a response has started) and closes the connection."""
        self._refused = True
        self._cancel_timers()
        if self.transport.is_closing():
            return
        current = None if self._in_head else self.cycle  # the request being answered, once its head is in
        if current is None or not current.response_started:
            body = json.dumps(error_body(status, message, "request_too_large" if status == 431 else "request_timeout")).encode()
            self.transport.write(
                b"".join(
                    [
                        STATUS_LINE[status],
                        b"content-type: application/json\r\n",
                        b"content-length: ",
                        str(len(body)).encode(),
                        b"\r\n",
                        b"connection: close\r\n\r\n",
                        body,
                    ]
                )
            )
        if current is not None and not current.response_complete:
            current.disconnected = True  # the app reads a disconnect, and what it sends is dropped
        self.logger.info("%s: %d %s", f"{self.client[0]}:{self.client[1]}" if self.client else "client", status, message)
        self.close_gracefully()

    def close_gracefully(self) -> None:
        """Closes the connection; while its client may still be sending, after a linger (see above)."""
        raw = cast(_ClosingGracefully, self.transport).raw
        if self.lingering or raw.is_closing():
            return
        if not (self._body_incoming or (self._in_head and self._head_bytes)):
            raw.close()
            return
        self.lingering = True
        self._cancel_timers()
        if raw.can_write_eof():
            raw.write_eof()  # the answer goes out, then the server's side of the connection is shut
        raw.resume_reading()
        self.loop.call_later(LINGER_S, raw.close)
