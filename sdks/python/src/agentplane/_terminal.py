"""A process's terminal over the node agent's WebSocket, sync (`Terminal`) and asyncio
(`AsyncTerminal`): output bytes as they are written, keystrokes and control in.

Each connection opens with a fresh single-use ticket (`POST .../ticket`), so the token
never goes into a URL. A dropped connection is reopened from the last byte received
(`offset`): nothing is lost or repeated, and bytes the node agent no longer holds are
reported as a `TerminalGap`. Closing a terminal never stops its process."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from websockets.asyncio.client import ClientConnection as AsyncConnection
from websockets.asyncio.client import connect as async_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

from . import _calls
from ._errors import AgentPlaneError, AgentPlaneNetworkError
from ._http import AsyncHttp, Request, SyncHttp
from ._types import OutputStream, TerminalExit, TerminalGap

FIRST_DELAY = 0.05
MAX_DELAY = 2.0
RECONNECT_FOR = 30.0
"""How long reconnecting may fail before the terminal gives up."""
MAX_FRAME = 16 * 1024 * 1024

GapListener = Callable[[TerminalGap], None]
ErrorListener = Callable[[str], None]

# Failing to connect, worth another try (a refused ticket or a gone process is not).
_TRANSIENT = (AgentPlaneError, AgentPlaneNetworkError, OSError, InvalidHandshake, ConnectionClosed, TimeoutError)


class TerminalClosed(Exception):
    """The terminal was closed, or its program exited: nothing more can be sent."""


def _check_size(rows: int, cols: int) -> None:
    if not (1 <= rows <= 65535 and 1 <= cols <= 65535):
        raise ValueError(f"a terminal size is two integers from 1 to 65535, not {rows}x{cols}")


class _State:
    """What both kinds of terminal keep: the offset, the size, the exit, the gaps."""

    def __init__(
        self,
        process_id: str,
        offset: int | None,
        stream: OutputStream | None,
        reconnect: bool,
        on_gap: GapListener | None,
        on_error: ErrorListener | None,
    ) -> None:
        self.process_id = process_id
        self.offset = offset
        self.stream = stream
        self.reconnect = reconnect
        self.on_gap = on_gap
        self.on_error = on_error
        self.size: tuple[int, int] | None = None
        self.exit: TerminalExit | None = None
        self.gaps: list[TerminalGap] = []
        self.closed = False
        self.connected_once = False

    def connect_request(self, ticket: str) -> Request:
        query: dict[str, Any] = {"ticket": ticket, "offset": self.offset, "stream": self.stream}
        return Request("GET", "/v1/processes/{id}/connect", params={"id": self.process_id}, query=query)

    def ready(self, message: str | bytes) -> None:
        control = _control(message)
        if control is None or control.get("type") != "ready":
            raise AgentPlaneNetworkError(f"terminal of {self.process_id}", f"expected a ready message, got {message!r:.200}")
        if self.offset is None:
            self.offset = int(control["offset"])
        self.connected_once = True

    def resize_frame(self) -> str | None:
        if self.size is None:
            return None
        return json.dumps({"type": "resize", "rows": self.size[0], "cols": self.size[1]})

    def take(self, message: str | bytes) -> bytes | None:
        """Data to hand out, or None for a control message (acted on here)."""
        if isinstance(message, bytes):
            self.offset = (self.offset or 0) + len(message)
            return message
        control = _control(message)
        if control is None:
            return None
        kind = control.get("type")
        if kind == "gap":
            gap = TerminalGap(int(control["from"]), int(control["to"]))
            self.offset = max(self.offset or 0, gap.end)
            self.gaps.append(gap)
            if self.on_gap is not None:
                self.on_gap(gap)
        elif kind == "exit":
            self.exit = TerminalExit(control.get("exitCode"), control.get("signal"))
        elif kind == "error" and self.on_error is not None:
            self.on_error(str(control.get("message")))
        return None

    def done(self) -> bool:
        return self.closed or self.exit is not None

    def closed_error(self) -> TerminalClosed:
        why = "its program exited" if self.exit is not None else "it was closed"
        return TerminalClosed(f"the terminal of {self.process_id} is closed: {why}")


def _control(message: str | bytes) -> dict[str, Any] | None:
    if not isinstance(message, str):
        return None
    try:
        value = json.loads(message)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("type"), str) else None


def _giving_up(error: BaseException) -> bool:
    """A process that is gone, or a refused ticket, will not come back."""
    return isinstance(error, AgentPlaneError) and error.status < 500 and error.status != 429


class Terminal:
    """A terminal, sync. Iterating yields output bytes until the program exits (then
    `exit` says how); `read()` gives one chunk at a time, with a timeout. `write()`,
    `resize()` and `signal()` may be called from another thread than the reader's.

        with plane.processes.terminal(p.id) as term:
            term.write("echo $((6*7))\\n")
            for chunk in term:
                ...
    """

    def __init__(
        self,
        http: SyncHttp,
        process_id: str,
        *,
        offset: int | None = None,
        stream: OutputStream | None = None,
        reconnect: bool = True,
        on_gap: GapListener | None = None,
        on_error: ErrorListener | None = None,
    ) -> None:
        self._http = http
        self._state = _State(process_id, offset, stream, reconnect, on_gap, on_error)
        self._socket: ClientConnection | None = None
        self._lock = threading.RLock()

    @property
    def process_id(self) -> str:
        return self._state.process_id

    @property
    def offset(self) -> int | None:
        """The offset of the next byte this terminal will receive (None before it connected)."""
        return self._state.offset

    @property
    def exit(self) -> TerminalExit | None:
        """How the program ended, once it has."""
        return self._state.exit

    @property
    def gaps(self) -> list[TerminalGap]:
        """Every range of bytes lost to this client so far."""
        return list(self._state.gaps)

    def connect(self) -> None:
        """Connects now (writes and reads otherwise connect when first needed)."""
        self._connection()

    def write(self, data: bytes | str) -> None:
        """Keystrokes or any bytes for the program (a string is sent as UTF-8)."""
        payload = data.encode() if isinstance(data, str) else bytes(data)
        if payload:
            self._send(payload)

    def resize(self, rows: int, cols: int) -> None:
        """Resizes the terminal (the program gets SIGWINCH); applied again after a reconnect."""
        _check_size(rows, cols)
        self._state.size = (rows, cols)
        self._send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    def signal(self, name: str) -> None:
        """A signal to the terminal's foreground job, as a keypress would send it (`SIGINT`)."""
        self._send(json.dumps({"type": "signal", "signal": name}))

    def ack(self, offset: int) -> None:
        """Says that output up to `offset` was consumed (for flow control; see the API docs)."""
        self._send(json.dumps({"type": "ack", "offset": offset}))

    def reconnect(self) -> None:
        """Drops the current connection; the next read or write resumes from `offset`."""
        socket = self._socket
        if socket is not None:
            socket.close(4000, "reconnecting")

    def read(self, timeout: float | None = None) -> bytes:
        """The next output bytes; b"" once the program exited (or the terminal was closed).
        Raises TimeoutError when nothing came within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._state.done():
            socket = self._connection()
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                message = socket.recv(timeout=left)
            except ConnectionClosed:
                if self._state.done():
                    break
                if not self._state.reconnect:
                    self.close()
                    break
                self._drop(socket)
                continue
            data = self._state.take(message)
            if data:
                return data
        self._close_socket()
        return b""

    def __iter__(self) -> Iterator[bytes]:
        while True:
            data = self.read()
            if not data:
                return
            yield data

    def close(self) -> None:
        """Closes the connection for good; the process goes on."""
        self._state.closed = True
        self._close_socket()

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, frame: str | bytes) -> None:
        while True:
            if self._state.done():
                raise self._state.closed_error()
            socket = self._connection()
            try:
                socket.send(frame)
                return
            except ConnectionClosed:
                if not self._state.reconnect:
                    self.close()
                    raise self._state.closed_error() from None
                self._drop(socket)

    def _drop(self, socket: ClientConnection) -> None:
        with self._lock:
            if self._socket is socket:
                self._socket = None

    def _close_socket(self) -> None:
        with self._lock:
            socket, self._socket = self._socket, None
        if socket is not None:
            socket.close()

    def _connection(self) -> ClientConnection:
        with self._lock:
            if self._state.done():
                raise self._state.closed_error()
            if self._socket is not None:
                return self._socket
            delay = FIRST_DELAY
            give_up = time.monotonic() + RECONNECT_FOR
            while True:
                try:
                    self._socket = self._open()
                    return self._socket
                except _TRANSIENT as error:
                    if _giving_up(error) or time.monotonic() > give_up:
                        raise
                    if not self._state.reconnect and self._state.connected_once:
                        self._state.closed = True
                        raise self._state.closed_error() from error
                time.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)

    def _open(self) -> ClientConnection:
        ticket = self._http.send(_calls.issue_ticket(self._state.process_id).request).json()["ticket"]
        url = self._http.url(self._state.connect_request(ticket), websocket=True)
        # Entered as the context manager it is (websockets 17 asks for that); closed by close().
        socket = connect(url, max_size=MAX_FRAME, open_timeout=10, proxy=None).__enter__()
        try:
            self._state.ready(socket.recv(timeout=10))
            frame = self._state.resize_frame()
            if frame is not None:
                socket.send(frame)
        except BaseException:
            socket.close()
            raise
        return socket


class AsyncTerminal:
    """A terminal, asyncio. `async for chunk in term` yields output bytes until the
    program exits (then `exit` says how); `await term.write(...)`, `resize`, `signal`.

        async with plane.processes.terminal(p.id) as term:
            await term.write("echo $((6*7))\\n")
            async for chunk in term:
                ...
    """

    def __init__(
        self,
        http: AsyncHttp,
        process_id: str,
        *,
        offset: int | None = None,
        stream: OutputStream | None = None,
        reconnect: bool = True,
        on_gap: GapListener | None = None,
        on_error: ErrorListener | None = None,
    ) -> None:
        self._http = http
        self._state = _State(process_id, offset, stream, reconnect, on_gap, on_error)
        self._socket: AsyncConnection | None = None
        self._lock = asyncio.Lock()

    @property
    def process_id(self) -> str:
        return self._state.process_id

    @property
    def offset(self) -> int | None:
        return self._state.offset

    @property
    def exit(self) -> TerminalExit | None:
        return self._state.exit

    @property
    def gaps(self) -> list[TerminalGap]:
        return list(self._state.gaps)

    async def connect(self) -> None:
        await self._connection()

    async def write(self, data: bytes | str) -> None:
        payload = data.encode() if isinstance(data, str) else bytes(data)
        if payload:
            await self._send(payload)

    async def resize(self, rows: int, cols: int) -> None:
        _check_size(rows, cols)
        self._state.size = (rows, cols)
        await self._send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    async def signal(self, name: str) -> None:
        await self._send(json.dumps({"type": "signal", "signal": name}))

    async def ack(self, offset: int) -> None:
        await self._send(json.dumps({"type": "ack", "offset": offset}))

    async def reconnect(self) -> None:
        socket = self._socket
        if socket is not None:
            await socket.close(4000, "reconnecting")

    async def read(self) -> bytes:
        """The next output bytes; b"" once the program exited (or the terminal was
        closed). Bound it with `asyncio.timeout()` or `asyncio.wait_for()`."""
        while not self._state.done():
            socket = await self._connection()
            try:
                message = await socket.recv()
            except ConnectionClosed:
                if self._state.done():
                    break
                if not self._state.reconnect:
                    await self.close()
                    break
                self._drop(socket)
                continue
            data = self._state.take(message)
            if data:
                return data
        await self._close_socket()
        return b""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            data = await self.read()
            if not data:
                return
            yield data

    async def close(self) -> None:
        self._state.closed = True
        await self._close_socket()

    async def __aenter__(self) -> AsyncTerminal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(self, frame: str | bytes) -> None:
        while True:
            if self._state.done():
                raise self._state.closed_error()
            socket = await self._connection()
            try:
                await socket.send(frame)
                return
            except ConnectionClosed:
                if not self._state.reconnect:
                    await self.close()
                    raise self._state.closed_error() from None
                self._drop(socket)

    def _drop(self, socket: AsyncConnection) -> None:
        if self._socket is socket:
            self._socket = None

    async def _close_socket(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()

    async def _connection(self) -> AsyncConnection:
        async with self._lock:
            if self._state.done():
                raise self._state.closed_error()
            if self._socket is not None:
                return self._socket
            delay = FIRST_DELAY
            give_up = time.monotonic() + RECONNECT_FOR
            while True:
                try:
                    self._socket = await self._open()
                    return self._socket
                except _TRANSIENT as error:
                    if _giving_up(error) or time.monotonic() > give_up:
                        raise
                    if not self._state.reconnect and self._state.connected_once:
                        self._state.closed = True
                        raise self._state.closed_error() from error
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)

    async def _open(self) -> AsyncConnection:
        ticket = (await self._http.send(_calls.issue_ticket(self._state.process_id).request)).json()["ticket"]
        url = self._http.url(self._state.connect_request(ticket), websocket=True)
        socket = await async_connect(url, max_size=MAX_FRAME, open_timeout=10, proxy=None)
        try:
            self._state.ready(await asyncio.wait_for(socket.recv(), 10))
            frame = self._state.resize_frame()
            if frame is not None:
                await socket.send(frame)
        except BaseException:
            await socket.close()
            raise
        return socket

