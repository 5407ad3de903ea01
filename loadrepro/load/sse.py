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
