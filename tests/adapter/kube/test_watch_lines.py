"""Splitting a watch stream into events: chunks as an API server sends them, bursts and
events cut anywhere."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.kube.reflector import lines
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
