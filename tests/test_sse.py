"""SseStream (load/sse.py) gives the events of any chunking of a stream, in order, as its two steps (bytes to lines,
lines to events) give them, its fast path for a whole `data: ` event included; the fast path is taken only when
nothing is held from the chunks before it."""

from __future__ import annotations

import random

from loadrepro.load.sse import SseEvents, SseLines, SseStream

# Whole events, then legal framings that are not: CR and CRLF ends, a CR held at a chunk's end before a whole event,
# `data:` without its space, data over two lines, comments and other fields.
STREAM = (b'data: {"a": 1}\n\n' b"data: {\"b\": 2}\n\r" b'data: {"c": 3}\n\n' b": keep-alive\r\r"
          b'retry: 1000\r\nid: 1\r\ndata:{"d": 4}\r\n\r\n' b'data: {"e":\ndata: 5}\n\n' b'data: {"f": 6}\r\r'
          b'data: {"g": 7}\n\n' b"data: [DONE]\n\n")


def _two_steps(chunks: list[bytes]) -> list[bytes]:
    lines, events, out = SseLines(), SseEvents(), []
    for chunk in chunks:
        out += [d for line in lines.feed(chunk) if (d := events.feed(line)) is not None]
    out += [d for line in (*lines.flush(), b"") if (d := events.feed(line)) is not None]
    return out


def _streamed(chunks: list[bytes]) -> list[bytes]:
    stream, out = SseStream(), []
    for chunk in chunks:
        out += stream.feed(chunk)
    return out + stream.flush()


def _cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in zip(edges, edges[1:])]


def test_every_chunking_gives_the_events_of_the_two_steps_in_order():
    expected = _two_steps([STREAM])
    assert expected == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}', b'{"d": 4}', b'{"e":\n5}', b'{"f": 6}',
                        b'{"g": 7}', b"[DONE]"]
    draw = random.Random(7)
    chunkings = [_cut(STREAM, [i]) for i in range(1, len(STREAM))]
    chunkings += [_cut(STREAM, draw.sample(range(1, len(STREAM)), draw.randint(2, 40))) for _ in range(500)]
    for chunks in chunkings:
        assert _streamed(chunks) == expected, chunks


def test_a_whole_event_after_a_held_cr_comes_after_the_event_the_cr_ends():
    """"data: b\\n\\r" holds its CR (it may begin a CRLF): the whole event written next must not be taken first, nor
    joined to b's data."""
    chunks = [b'data: {"b": 2}\n\r', b'data: {"c": 3}\n\n']
    assert _streamed(chunks) == [b'{"b": 2}', b'{"c": 3}']
    one_line = [b'data: {"b":', b' 2}\n', b'data: {"c": 3}\n\n']  # b's data waits for its blank line: c joins it
    assert _streamed(one_line) == _two_steps(one_line) == [b'{"b": 2}\n{"c": 3}']
