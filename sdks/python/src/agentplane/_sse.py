"""Server-sent events: an incremental parser of the WHATWG "event stream" format, fed
bytes as they arrive (any chunking), giving each event when its blank line does."""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(frozen=True)
class SseMessage:
    """One server-sent event."""

    event: str
    """The `event:` field; `message` when there was none."""
    data: str
    id: str | None = None
    """The `id:` field in force (the last one the stream sent), if any."""


class SseParser:
    """`\\n`, `\\r\\n` or `\\r` line ends, `:` comments, multi-line `data:`; a partial
    event at the end of the stream is dropped, as the format says."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._buffer = ""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseMessage]:
        self._buffer += self._decoder.decode(chunk)
        messages: list[SseMessage] = []
        start = 0
        buffer = self._buffer
        while True:
            end = _line_end(buffer, start)
            if end == -1:
                break
            # A `\r` at the very end may be the first half of `\r\n`: wait for more.
            if buffer[end] == "\r" and end + 1 == len(buffer):
                break
            line = buffer[start:end]
            start = end + (2 if buffer[end] == "\r" and buffer[end + 1] == "\n" else 1)
            message = self._line(line)
            if message is not None:
                messages.append(message)
        self._buffer = buffer[start:]
        return messages

    def close(self) -> list[SseMessage]:
        """At the end of the stream: a `\r` held back as maybe half of `\r\n` ends its
        line (what is left after it is a partial event, dropped)."""
        rest, self._buffer = self._buffer + self._decoder.decode(b"", final=True), ""
        if not rest.endswith("\r"):
            return []
        message = self._line(rest[:-1])  # feed() left no other line end in the buffer
        return [] if message is None else [message]

    def _line(self, line: str) -> SseMessage | None:
        if line == "":
            message = None
            if self._data:
                message = SseMessage(self._event or "message", "\n".join(self._data), self._id)
            self._data = []
            self._event = ""
            return message
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id = value
        return None


def _line_end(text: str, start: int) -> int:
    newline = text.find("\n", start)
    carriage = text.find("\r", start)
    if newline == -1:
        return carriage
    if carriage == -1:
        return newline
    return min(newline, carriage)
