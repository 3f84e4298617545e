"""Splitting a watch stream into events: chunks as an API server sends them, bursts and
events cut anywhere."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kube.reflector import WATCH_BATCH_MAX_S, StreamEnded, lines
from adapter.kube.resources import decode


class Stream:
    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[Any]:
        yield from self.chunks


def events(n: int) -> list[bytes]:
    return [
        json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": f"pod-{i}"}}}).encode()
        for i in range(n)
    ]


def test_a_burst_in_one_chunk_and_events_cut_across_chunks() -> None:
    sent = events(5)
    body = b"\n".join(sent) + b"\n"
    chunks = [body[:7], body[7:40], body[40:], b""]
    assert list(lines(Stream(chunks))) == sent
    assert list(lines(Stream([body]))) == sent


def test_text_segments_empty_lines_and_a_cut_off_tail() -> None:
    got = list(lines(Stream(['{"a": 1}\n', b"\n", b'{"b": 2}\n{"c"'])))
    assert [json.loads(x) for x in got if x] == [{"a": 1}, {"b": 2}]


@given(st.integers(1, 40), st.lists(st.integers(0, 4000), max_size=12))
def test_any_cuts_give_back_every_event_in_order(n: int, cuts: list[int]) -> None:
    sent = events(n)
    body = b"\n".join(sent) + b"\n"
    edges = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    chunks = [body[a:b] for a, b in itertools.pairwise(edges)]
    assert list(lines(Stream(chunks))) == sent


@pytest.mark.parametrize(
    "document",
    [
        b'{"type": "MODIFIED", "object": {"kind": "Pod", "spec": {"priority": 7}}}',
        b'{"metadata": {"name": "caf\\u00e9"}, "value": -2147483648, "x": 1.5e3}',
        b'{"value": NaN}',  # the stdlib reads it; orjson does not
        b'{"name": "\\ud800"}',  # a lone surrogate: likewise
    ],
)
def test_decode_reads_what_the_stdlib_reads(document: bytes) -> None:
    import math

    decoded, expected = decode(document), json.loads(document)
    if "NaN" in document.decode():
        assert math.isnan(decoded["value"]) and math.isnan(expected["value"])
    else:
        assert decoded == expected


def test_decode_refuses_what_is_not_json() -> None:
    with pytest.raises(json.JSONDecodeError):
        decode(b'{"type": "ADDED", "object": ')


class Pieces(io.RawIOBase):
    """A socket that hands out its bytes in the pieces given, one per read."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = list(pieces)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.pieces:
            return 0
        piece = self.pieces.pop(0)
        n = min(len(piece), len(buffer))
        buffer[:n] = piece[:n]
        if n < len(piece):
            self.pieces.insert(0, piece[n:])
        return n


class Chunked:
    """A urllib3 response to a watch, its body chunked as an API server sends it."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.chunked = True
        self._fp = type("HTTPResponse", (), {})()
        self._fp.fp = io.BufferedReader(Pieces(pieces))

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[Any]:
        raise AssertionError("a chunked body is read off the socket, not chunk by chunk")


def chunked(events: list[bytes], extension: bytes = b"") -> bytes:
    """Every event a chunk of its own, as kube-apiserver flushes them, and the last chunk."""
    body = b"".join(b"%x%s\r\n%s\n\r\n" % (len(e) + 1, extension, e) for e in events)
    return body + b"0\r\n\r\n"


def rechunked(data: bytes, sizes: list[int], extension: bytes = b"") -> bytes:
    """``data`` in chunks of the ``sizes`` given (cycled), as a proxy may cut it: events
    split across chunks, several in one."""
    body, at = b"", 0
    for size in itertools.cycle([s for s in sizes if s > 0] or [len(data)]):
        if at >= len(data):
            return body + b"0\r\nTrailer: x\r\n\r\n"
        piece = data[at : at + size]
        body += b"%X%s\r\n%s\r\n" % (len(piece), extension, piece)
        at += size
    raise AssertionError


@settings(deadline=None)
@given(
    st.integers(1, 30),
    st.lists(st.integers(0, 10**5), max_size=15),
    st.booleans(),
    st.one_of(st.none(), st.lists(st.integers(1, 3000), min_size=1, max_size=4)),
    st.sampled_from([0.0, 0.001]),
)
def test_a_chunked_stream_cut_anywhere_gives_back_every_event(
    n: int, cuts: list[int], extended: bool, sizes: list[int] | None, pause_s: float
) -> None:
    sent = events(n)
    extension = b";ext=1" if extended else b""
    if sizes is None:
        body = chunked(sent, extension)  # an event per chunk, as kube-apiserver sends them
    else:
        body = rechunked(b"".join(e + b"\n" for e in sent), sizes, extension)
    edges = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    pieces = [body[a:b] for a, b in itertools.pairwise(edges)]
    assert [line for line in lines(Chunked(pieces), pause_s) if line] == sent


def test_a_chunk_may_hold_crlf_and_be_larger_than_any_read() -> None:
    data = b"x" * 300_000 + b"\r\n" + b"y" * 10 + b"\n"
    body = rechunked(data, [len(data)])
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    assert list(lines(Chunked(pieces))) == [b"x" * 300_000 + b"\r", b"y" * 10]


def test_reads_take_every_chunk_that_came_at_once() -> None:
    sent = events(50)
    response = Chunked([chunked(sent)])
    reads: list[int] = []
    real = response._fp.fp.read1

    def counted(n: int) -> bytes:
        data: bytes = real(n)
        reads.append(len(data))
        return data

    response._fp.fp.read1 = counted
    assert [line for line in lines(response) if line] == sent
    assert len(reads) == 1  # 50 events, one read (urllib3 reads one chunk per read)


@pytest.mark.parametrize(
    ("per_read", "pause_s", "waits"),
    [
        ([1, 1], 0.01, [0.01, 0.01]),  # a trickle: read again as soon as before
        ([3], 0.01, [0.03]),  # a burst waits longer, so the next read takes more at once
        ([40], 0.01, [WATCH_BATCH_MAX_S]),  # but never past the cap
        ([2, 3], 0.08, [0.08, 0.08]),  # a pause set above the cap is kept, not shortened
    ],
)
def test_a_busy_watch_waits_longer_before_its_next_read(
    per_read: list[int], pause_s: float, waits: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = events(sum(per_read))
    reads, done = [], 0
    for count in per_read:  # each read brings ``count`` whole chunks
        reads.append(chunked(sent[done : done + count]).removesuffix(b"0\r\n\r\n"))
        done += count
    slept: list[float] = []
    monkeypatch.setattr("adapter.kube.reflector.time.sleep", slept.append)
    response = Chunked([])
    pieces = iter([*reads, b"0\r\n\r\n"])
    response._fp.fp.read1 = lambda n: next(pieces, b"")
    assert [line for line in lines(response, pause_s) if line] == sent
    assert slept == pytest.approx(waits)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (chunked(events(3))[:-5], "before its last chunk"),  # the connection closed early
        (b"zz\r\n{}\n\r\n0\r\n\r\n", "bad chunk size"),
        (b"-1\r\n{}\n\r\n0\r\n\r\n", "bad chunk size"),
        (b"3\r\n{}\nxx0\r\n\r\n", "not followed by CRLF"),
    ],
)
def test_a_stream_cut_short_or_garbled_ends_the_watch(body: bytes, why: str) -> None:
    with pytest.raises(StreamEnded, match=why):
        list(lines(Chunked([body])))
