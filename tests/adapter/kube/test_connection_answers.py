"""How ``adapter.kube.connections`` reads an answer (llhttp, ``httptools``): a refusal
as the binder reads it, chunked bodies, bodies ended by the connection, interim answers,
bytes past an answer's end, answers cut short, too large or not HTTP, and a parser freed
once its answer is read."""

from __future__ import annotations

import gc
import http.client
import json
import weakref
from typing import Any

import httptools
import pytest
from kubernetes.client.exceptions import ApiException

from adapter.kube import connections as connections_module
from adapter.kube.connections import Connections
from tests.adapter.kube.scripted import (
    BODY,
    Script,
    next_on_a_new_connection,
)


def test_a_refused_post_raises_what_the_binder_reads(
    connections: Connections, script: Script
) -> None:
    status = {"kind": "Status", "reason": "TooManyRequests", "message": "slow down"}
    script.answers = [
        {"status": 429, "headers": {"Retry-After": "2"}, "body": json.dumps(status).encode()},
        {},
    ]
    with pytest.raises(ApiException) as raised:
        connections.post("/x", BODY, 1.0, 1.0)
    assert raised.value.status == 429
    assert json.loads(raised.value.body or "") == status
    assert (raised.value.headers or {}).get("Retry-After") == "2"
    connections.post("/x", BODY, 1.0, 1.0)  # the refusal was read whole: the next is answered
    assert script.seen[0].port == script.seen[1].port


def test_a_chunked_answer_is_read_to_its_end(connections: Connections, script: Script) -> None:
    script.answers = [{"status": 409, "chunked": True, "body": b'{"reason":"Conflict"}'}, {}]
    with pytest.raises(ApiException) as raised:
        connections.post("/x", BODY, 1.0, 1.0)
    assert json.loads(raised.value.body or "") == {"reason": "Conflict"}
    connections.post("/x", BODY, 1.0, 1.0)
    assert script.seen[0].port == script.seen[1].port


def test_an_interim_answer_is_an_error_and_its_final_answer_is_never_the_next_ones(
    connections: Connections, script: Script
) -> None:
    script.answers = [
        {"interim": True, "delay_s": 0.05, "body": b'{"first":true}'},
        {"status": 409, "body": b'{"second":true}'},
    ]
    with pytest.raises(http.client.HTTPException):
        connections.post("/first", BODY, 1.0, 1.0)
    with pytest.raises(ApiException) as raised:
        connections.post("/second", BODY, 1.0, 1.0)  # its own 409, not the first's 201
    assert raised.value.status == 409
    assert script.seen[0].port != script.seen[1].port


def test_an_answer_without_a_length_ends_with_its_connection(
    connections: Connections, script: Script
) -> None:
    body = b'{"kind":"Status","code":409}'
    script.answers = [
        {"raw": b"HTTP/1.0 409 Conflict\r\nContent-Type: application/json\r\n\r\n" + body},
        {},
    ]
    with pytest.raises(ApiException) as raised:
        connections.post("/a", BODY, 1.0, 1.0)
    assert raised.value.status == 409
    assert raised.value.reason == "Conflict"
    assert raised.value.body == body.decode()
    next_on_a_new_connection(connections, script)


def test_a_transfer_coding_not_ending_in_chunked_ends_with_the_connection(
    connections: Connections, script: Script
) -> None:
    body = b'{"kind":"Status","code":409}'
    raw = b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: identity\r\n\r\n" + body
    script.answers = [{"raw": raw}, {}]
    with pytest.raises(ApiException) as raised:
        connections.post("/a", BODY, 1.0, 1.0)
    assert (raised.value.status, raised.value.body) == (409, body.decode())


def test_head_is_refused_not_sent(connections: Connections, script: Script) -> None:
    with pytest.raises(ValueError):
        connections.request("HEAD", "/a", b"", 1.0, 1.0)
    assert script.seen == []


def test_bytes_past_a_whole_answer_leave_it_standing_and_the_connection_dropped(
    connections: Connections, script: Script
) -> None:
    whole = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
    upgrade = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"
    for junk in (b"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n", b"\x00not http", upgrade):
        script.answers = [{"raw": whole + junk, "close_after": False}, {}]
        script.seen.clear()
        connections.post("/a", BODY, 1.0, 1.0)  # the 201, not what came after it
        next_on_a_new_connection(connections, script)


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        # cut short: never a partial success
        (
            {"raw": b"HTTP/1.1 201 Created\r\nContent-Length: 40\r\n\r\n" + b'{"kind":'},
            http.client.IncompleteRead,
        ),
        # larger than any answer to what is sent here (MAX_ANSWER_BYTES set to 1,000)
        ({"body": b"x" * 5000}, http.client.HTTPException),
        # not HTTP: llhttp's error, the outcome unknown (not a refusal, not unsent)
        ({"raw": b"SSH-2.0-OpenSSH_9.6\r\n", "close_after": False}, httptools.HttpParserError),
    ],
    ids=["cut-short", "too-large", "not-http"],
)
def test_a_broken_answer_raises_and_the_next_post_connects_afresh(
    connections: Connections,
    script: Script,
    monkeypatch: pytest.MonkeyPatch,
    answer: dict[str, Any],
    raised: type[Exception],
) -> None:
    monkeypatch.setattr(connections_module, "MAX_ANSWER_BYTES", 1000)
    script.answers = [answer, {}]
    with pytest.raises(raised):
        connections.post("/a", BODY, 1.0, 1.0)
    next_on_a_new_connection(connections, script)


def test_a_refusals_headers_are_read_whatever_their_case(
    connections: Connections, script: Script
) -> None:
    raw = (
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\nRetry-After: 9\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    script.answers = [{"raw": raw, "close_after": False}, {}]
    with pytest.raises(ApiException) as raised:
        connections.post("/a", BODY, 1.0, 1.0)
    assert (raised.value.headers or {}).get("Retry-After") == "3"  # the first, as http.client
    assert raised.value.reason == "Too Many Requests"
    connections.post("/b", BODY, 1.0, 1.0)  # read whole: the connection is kept
    assert script.seen[0].port == script.seen[1].port


def test_an_answer_read_is_freed_at_once_not_left_to_the_cyclic_collector(
    connections: Connections, script: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[weakref.ref[Any]] = []

    class Tracked(connections_module._Answer):
        def __init__(self) -> None:
            super().__init__()
            made.append(weakref.ref(self))

    monkeypatch.setattr(connections_module, "_Answer", Tracked)
    # Answered 2xx: a refusal's exception holds the frame it was raised in, answer and all.
    script.answers = [{}, {"chunked": True}]
    gc.disable()
    try:
        connections.post("/a", BODY, 1.0, 1.0)
        connections.post("/b", BODY, 1.0, 1.0)
        assert len(made) == 2
        assert [ref() for ref in made] == [None, None]
    finally:
        gc.enable()
