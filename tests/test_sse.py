"""SseStream (load/sse.py) gives the events of any chunking of a stream, in order, as its two steps (bytes to lines,
lines to events) give them, its fast path for LF-ended `data: ` events included, one or several to a chunk; the fast
path is taken only when no CR is held and no event's data waits for its blank line."""

from __future__ import annotations

import random

from loadrepro.load.sse import SseEvents, SseLines, SseStream

# Whole events, then legal framings that are not: CR and CRLF ends, a CR held at a chunk's end before a whole event,
# `data:` without its space, data over two lines, comments and other fields.
STREAM = (b'data: {"a": 1}\n\n' b"data: {\"b\": 2}\n\r" b'data: {"c": 3}\n\n' b": keep-alive\r\r"
          b'retry: 1000\r\nid: 1\r\ndata:{"d": 4}\r\n\r\n' b'data: {"e":\ndata: 5}\n\n' b'data: {"f": 6}\r\r'
          b'data: {"g": 7}\n\n' b"data: [DONE]\n\n")

# LF only, as the fast path takes it: several whole events to a chunk, between them an odd number of blank lines,
# comments, other fields, `data:` without its space and data over two lines.
LF_STREAM = (b'data: {"a": 1}\n\ndata: {"b": 2}\n\n\ndata: {"c": 3}\n\n: keep-alive\n\nid: 1\ndata:{"d": 4}\n\n'
             b'data: {"e":\ndata: 5}\n\n\n\n\ndata: {"f": 6}\n\ndata: [DONE]\n\n')


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


def test_every_chunking_of_an_lf_stream_gives_the_events_of_the_two_steps_in_order():
    expected = _two_steps([LF_STREAM])
    assert expected == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}', b'{"d": 4}', b'{"e":\n5}', b'{"f": 6}', b"[DONE]"]
    draw = random.Random(11)
    chunkings = [[LF_STREAM], *(_cut(LF_STREAM, [i]) for i in range(1, len(LF_STREAM)))]
    chunkings += [_cut(LF_STREAM, draw.sample(range(1, len(LF_STREAM)), draw.randint(2, 30))) for _ in range(500)]
    for chunks in chunkings:
        assert _streamed(chunks) == expected, chunks


def test_a_stream_that_ends_without_its_blank_line_gives_its_last_event():
    for chunks in ([b'data: {"a": 1}\n\ndata: {"b": 2}'], [b'data: {"a": 1}\n\ndata: {"b": 2}\n'],
                   [b'data: {"a": 1}\n\ndata: {"b":', b' 2}\n']):
        assert _streamed(chunks) == _two_steps(chunks) == [b'{"a": 1}', b'{"b": 2}']


def test_a_whole_event_after_a_held_cr_comes_after_the_event_the_cr_ends():
    """"data: b\\n\\r" holds its CR (it may begin a CRLF): the whole event written next must not be taken first, nor
    joined to b's data."""
    chunks = [b'data: {"b": 2}\n\r', b'data: {"c": 3}\n\n']
    assert _streamed(chunks) == [b'{"b": 2}', b'{"c": 3}']
    one_line = [b'data: {"b":', b' 2}\n', b'data: {"c": 3}\n\n']  # b's data waits for its blank line: c joins it
    assert _streamed(one_line) == _two_steps(one_line) == [b'{"b": 2}\n{"c": 3}']
