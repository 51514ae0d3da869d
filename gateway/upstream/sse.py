"""A pure, incremental server-sent-events decoder (no I/O), after openai-python's.

Feed it bytes as they arrive, in chunks of any size (a CR/LF pair may be split across
chunks); it yields the `data` of each complete event. Used to watch a relayed stream
without delaying it: the bytes themselves go to the client untouched.
"""

from __future__ import annotations

from collections.abc import Iterator


class SSEDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """Yield the data of every event completed by `chunk`."""
        self._buffer += chunk
        while True:
            line, sep, rest = self._split_line(self._buffer)
            if not sep:
                return
            self._buffer = rest
            if not line:  # a blank line ends the event
                if self._data:
                    yield b"\n".join(self._data)
                    self._data = []
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)

    @staticmethod
    def _split_line(buffer: bytes) -> tuple[bytes, bytes, bytes]:
        """(line, separator, rest); an empty separator means no complete line yet."""
        lf, cr = buffer.find(b"\n"), buffer.find(b"\r")
        if cr == -1 and lf == -1:
            return b"", b"", buffer
        if cr == -1 or (lf != -1 and lf < cr):
            return buffer[:lf], b"\n", buffer[lf + 1:]
        if cr + 1 == len(buffer):  # a lone \r at the end: its \n may come in the next chunk
            return b"", b"", buffer
        skip = 2 if buffer[cr + 1] == 0x0A else 1
        return buffer[:cr], buffer[cr:cr + skip], buffer[cr + skip:]

    def flush(self) -> Iterator[bytes]:
        """At the end of the stream: the data of an unterminated last event, if any."""
        tail = list(self.feed(b"\n\n")) if self._buffer or self._data else []
        yield from tail
