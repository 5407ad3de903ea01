"""Server-sent events as OpenAI-compatible streams send them: bytes to lines (LF, CRLF or a lone CR), lines to
events (`data:` fields joined, dispatched at a blank line). Pure: no I/O, no clock."""

from __future__ import annotations


class SseLines:
    """Bytes -> lines, ending at LF, CRLF or a lone CR as SSE allows; a CR at a chunk's end waits for the next
    chunk, which may begin with its LF. Streams without CR take the fast path."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk
        if b"\r" in data:
            held = b"\r" if data.endswith(b"\r") else b""
            data = (data[:-1] if held else data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            held = b""
        lines = data.split(b"\n")
        self._pending = lines.pop() + held
        return lines

    def flush(self) -> list[bytes]:
        rest, self._pending = self._pending.rstrip(b"\r"), b""
        return [rest] if rest else []

    def take(self, chunk: bytes) -> bytes | None:
        """What is held, then the chunk, with nothing held any more; None (and nothing taken) when either holds a
        CR, which only `feed` reads right."""
        if b"\r" in chunk or self._pending.endswith(b"\r"):
            return None
        data, self._pending = self._pending + chunk, b""
        return data

    @property
    def empty(self) -> bool:
        """Nothing held back from the chunks fed so far."""
        return not self._pending


class SseEvents:
    """SSE framing over lines: `data:` fields joined by newlines, dispatched at a blank line (other fields and
    comments ignored, as OpenAI-compatible streams use none)."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: list[bytes] = []

    def feed(self, line: bytes) -> bytes | None:
        line = line.rstrip(b"\r\n")
        if not line:
            if not self._data:
                return None
            data, self._data = b"\n".join(self._data), []
            return data
        if line.startswith(b"data:"):
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
        return None

    def flush(self) -> bytes | None:
        return self.feed(b"")

    @property
    def empty(self) -> bool:
        """No `data:` field waiting for its blank line."""
        return not self._data


class SseStream:
    """Bytes -> events (SseLines, then SseEvents), with a fast path for what engines send most: LF line ends, and
    events of one `data: ` line each, one or several to a chunk. Such an event's data is sliced out at once, the same
    bytes the two steps give; splitting every chunk into lines and lines into events was a third of the client's
    cost per token."""

    __slots__ = ("_events", "_lines")

    def __init__(self) -> None:
        self._lines = SseLines()
        self._events = SseEvents()

    def feed(self, chunk: bytes) -> list[bytes]:
        if (chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") and chunk.count(b"\n") == 2
                and b"\r" not in chunk and self._lines.empty and self._events.empty):
            return [chunk[6:-2]]  # one whole event, the most common chunk of all
        data = self._lines.take(chunk) if self._events.empty else None
        if data is None:
            return self._dispatched(self._lines.feed(chunk))
        # Every "\n\n" ends a line and then a blank line: the event before it is whole, and nothing is held
        # between two of them. What follows the last one goes through the two steps.
        blocks = data.split(b"\n\n")
        rest = blocks.pop()
        events = [block[6:] for block in blocks if block.startswith(b"data: ")]
        if len(events) < len(blocks) or data.count(b"\n", 0, len(data) - len(rest)) > 2 * len(blocks):
            # Not every block is one `data: ` line: other fields, comments, data over several lines, `data:`
            # without its space, empty lines.
            events = [event for block in blocks for event in self._dispatched([*block.split(b"\n"), b""])]
        if rest:
            events += self._dispatched(self._lines.feed(rest))
        return events

    def flush(self) -> list[bytes]:
        """The events a stream's end completes (a last event without its blank line)."""
        return self._dispatched([*self._lines.flush(), b""])

    def _dispatched(self, lines: list[bytes]) -> list[bytes]:
        return [data for line in lines if (data := self._events.feed(line)) is not None]
