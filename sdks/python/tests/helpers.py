"""What the tests share: the binary, waiting on conditions instead of sleeping, and a
TCP proxy whose connections a test can cut."""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
BINARY = os.environ.get("AGENTPLANE_BIN") or str(ROOT / "../../target/debug/agentplane")
if not Path(BINARY).exists():
    raise RuntimeError(f"{BINARY} does not exist: build it (cargo build -p agentplane) or set AGENTPLANE_BIN")

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T], timeout: float = 20.0) -> T:
    """Polls `probe` until it returns something truthy (bounded: the poll is the wait)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """True while /proc has a live (not zombie) process with this pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def screen_has(pattern: bytes, text: bytes) -> bool:
    return re.search(pattern, text) is not None


class CuttableProxy:
    """A TCP proxy in front of a node agent. `cut()` resets every connection through it
    at once, as a network failure would; `connections` counts those made. `watch`, if
    given, sees each piece of the node agent's answer on a connection and returns
    True to cut that connection there."""

    def __init__(self, target: str, watch: Callable[[dict[str, Any], bytes], bool] | None = None) -> None:
        host, port = target.removeprefix("http://").split(":")
        self._target = (host, int(port))
        self._watch = watch
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.connections = 0
        self.cuts = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            with self._lock:
                self.connections += 1
                self._open |= {client, upstream}
            state: dict[str, Any] = {"answer": b""}
            threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, state), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, state: dict[str, Any] | None) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
                if state is not None and self._watch is not None:
                    state["answer"] += data
                    if self._watch(state, data):
                        with self._lock:
                            self.cuts += 1
                        self._reset(source, sink)
                        return
        except OSError:
            pass
        self._reset(source, sink)

    def _reset(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with self._lock:
                self._open.discard(sock)
            try:
                # SO_LINGER 0: close() sends a reset, not an orderly end.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            sock.close()

    def cut(self) -> None:
        with self._lock:
            sockets = list(self._open)
            self.cuts += 1
        self._reset(*sockets)

    def close(self) -> None:
        self._server.close()
        self.cut()
