"""Clients without the token (issue 21): refused from their headers alone on every route, before any
body is read; request heads bounded in size and count; requests that never finish their head or
their body cut off. No such client costs the server more than a few kilobytes or holds a
connection past the configured deadlines, and clients that do send their requests see no change."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import ServerProcess, start_server
from probe import RESET, TIMEOUT, attempt, health_latencies, report, status_of

HEADER_TIMEOUT, BODY_TIMEOUT = 1.0, 1.0  # the test server's deadlines (the defaults are 10 s and 30 s)
ROUTES = [
    "/v1/chat/completions",
    "/v1/art/models/register",
    "/v1/art/models/x/train",
    "/v1/art/models/x/train_sft",
    "/v1/art/models/x/log",
    "/v1/art/models/x/delete_checkpoints",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory) -> Iterator[ServerProcess]:
    s = start_server(
        tmp_path_factory.mktemp("untrusted"),
        "--base-model",
        "builtin:tiny",
        "--header-timeout",
        str(HEADER_TIMEOUT),
        "--body-timeout",
        str(BODY_TIMEOUT),
    )
    yield s
    s.stop()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def raw(server: ServerProcess) -> socket.socket:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)))


def answer(sock: socket.socket, wait: float) -> bytes:
    """What the server sent within `wait` s and whether it closed: b'OPEN' while it still holds the connection."""
    sock.settimeout(wait)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
        return got or b"closed"
    except TimeoutError:
        return got + b"OPEN"
    except ConnectionResetError:
        return got + b"reset"


def test_a_large_body_without_the_token_is_refused_unread_without_stalling_the_server(srv):
    statuses, seconds = [], []
    with health_latencies(srv.url, interval=0.02) as health, httpx.Client(base_url=srv.url, timeout=30) as c:
        memory_before = rss_mb(srv.process.pid)
        for _ in range(3):
            t = time.perf_counter()
            statuses.append(
                status_of(
                    attempt(
                        lambda: c.post(
                            "/v1/art/models/register",
                            content=b'{"name": "' + b"x" * 30_000_000,
                            headers={"Content-Type": "application/json"},
                        )
                    )
                )
            )
            seconds.append(time.perf_counter() - t)
        grown = rss_mb(srv.process.pid) - memory_before
    worst = max(health, default=0.0)
    print(
        f"30 MB without a token: {statuses} in {max(seconds):.2f} s at most; /health at most {worst * 1000:.0f} ms; "
        f"server memory +{grown:.0f} MB"
    )
    report(
        "30 MB body without a token (x3): answer time, /health meanwhile, memory",
        statuses,
        hang=worst > 0.5,
        wrong=", ".join(
            w
            for w in [f"{max(seconds):.1f} s to answer" if max(seconds) > 1 else "", f"+{grown:.0f} MB" if grown > 50 else ""]
            if w
        ),
    )
    # The client sees the 401 (the server closes gracefully: no reset loses it), at once.
    assert statuses == [401, 401, 401], statuses
    assert max(seconds) < 1 and worst < 0.5 and grown < 50


def test_every_route_refuses_a_request_without_the_token_before_reading_its_body(srv):
    statuses = {}
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        for path in ROUTES:
            statuses[f"{path} not JSON"] = status_of(
                attempt(lambda: c.post(path, content=b"{not json", headers={"Content-Type": "application/json"}))
            )
            statuses[f"{path} wrong token"] = status_of(
                attempt(lambda: c.post(path, json={}, headers={"Authorization": "Bearer nope"}))
            )
        # A chunked body (no Content-Length): nothing buffers it before the token is checked.
        chunks = (b"x" * 65536 for _ in range(64))
        statuses["chunked 4 MB"] = status_of(attempt(lambda: c.post("/v1/art/models/x/train", content=chunks)))
    report("'{not json', a wrong token, a chunked 4 MB body, without the token, on every route", list(statuses.values()))
    assert set(statuses.values()) == {401}, statuses


def test_request_heads_are_bounded_in_bytes_and_count(srv):
    def raw_status(head: bytes) -> int:  # raw: httpx takes seconds to send 20,000 headers and refuses long URLs
        with raw(srv) as s:
            s.sendall(head)
            return int(answer(s, 10)[9:12] or 0)

    with httpx.Client(base_url=srv.url, timeout=30) as c:
        big = status_of(attempt(lambda: c.get("/health", headers={"X-Big": "a" * 8_000_000})))
        normal = c.get("/health", headers=[(f"X-H{i}", "1") for i in range(50)]).status_code
    many = raw_status(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(20_000)) + b"\r\n")
    url = raw_status(b"GET /health?" + b"q" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    report("an 8 MB header; 20,000 headers; a 100 kB URL (without a token)", [big, many, url])
    assert (big, many, url) == (431, 431, 431)
    assert normal == 200


def test_connections_that_never_finish_their_request_are_closed_at_the_deadlines(srv):
    half_open = []
    for _ in range(32):
        s = raw(srv)
        s.sendall(b"POST /v1/art/models/register HTTP/1.1\r\nHost: x\r\n")
        half_open.append(s)
    slow_body = raw(srv)
    slow_body.sendall(
        f"POST /v1/art/models/register HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
        f'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"name"'.encode()
    )
    silent = raw(srv)
    started = time.perf_counter()
    time.sleep(HEADER_TIMEOUT + BODY_TIMEOUT + 1)
    heads = [answer(s, 1) for s in half_open]
    body = answer(slow_body, 1)
    idle = answer(silent, 1)
    waited = time.perf_counter() - started
    for s in [*half_open, slow_body, silent]:
        s.close()
    closed = sum(a.startswith(b"HTTP/1.1 408") and not a.endswith(b"OPEN") for a in heads)
    wrong = [
        f"{32 - closed} of 32 half-open connections still open after {waited:.0f} s" if closed < 32 else "",
        "the silent connection still open" if idle != b"closed" else "",
    ]
    report(
        "32 half-open connections, a stalled body, a silent connection (deadlines 1 s)",
        [408 if a.startswith(b"HTTP/1.1 408") else TIMEOUT if a.endswith(b"OPEN") else RESET for a in [*heads, body]],
        wrong=", ".join(w for w in wrong if w),
    )
    assert closed == 32, heads[:3]
    assert body.startswith(b"HTTP/1.1 408") and not body.endswith(b"OPEN"), body
    assert idle == b"closed", idle  # nothing was asked: closed without an answer


def test_clients_that_do_send_their_requests_see_no_change(srv):
    with srv.client() as c:
        # A kept-alive connection idle between requests for longer than the head deadline stays usable.
        first = c.get("/v1/models").status_code
        time.sleep(HEADER_TIMEOUT * 1.5)
        second = c.get("/v1/models").status_code

        # A body that arrives in pieces, each pause shorter than the body deadline.
        def pieces():
            body = b'{"model": "builtin:tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
            for i in range(0, len(body), 30):
                time.sleep(BODY_TIMEOUT / 4)
                yield body[i : i + 30]

        slow = c.post("/v1/chat/completions", content=pieces(), headers={"Content-Type": "application/json"}).status_code
    report("requests that pause within the deadlines (keep-alive idle, a body in pieces)", [first, second, slow])
    assert (first, second, slow) == (200, 200, 200)
