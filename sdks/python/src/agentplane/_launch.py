"""`start()`: runs `agentplane node-agent` on a free loopback port with a random token
(given on its stdin, never on its command line or in its environment), waits for
the line that says it serves, and stops it and all it ran when asked, or when this
program exits without having asked."""

from __future__ import annotations

import atexit
import os
import queue
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

STOP_TIMEOUT = 15.0


@dataclass
class Launched:
    """A node agent this program started: where it serves, and how to stop it."""

    base_url: str
    token: str
    process: subprocess.Popen[bytes]
    data_dir: str | None
    """The temporary data directory it was given, removed when it stops."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM (on which the node agent stops everything it runs), waits for it;
        SIGKILL to its whole process group if it has not gone in 15 s. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        atexit.unregister(self.stop)
        pid = self.process.pid
        try:
            # Reaped already (by an earlier wait): its pid may name another by now.
            if self.process.returncode is None:
                if not _exited(pid, 0):
                    if self.process.stdin is not None:
                        try:
                            self.process.stdin.close()
                        except OSError:
                            pass  # gone already
                    self.process.send_signal(signal.SIGTERM)
                    if not _exited(pid, STOP_TIMEOUT):
                        _kill_group(pid)
                        _exited(pid, None)
                # Its group is its own (a new session): anything of it still there goes
                # too. Not reaped yet, its pid still names that group, never another.
                _kill_group(pid)
            self.process.wait()
        finally:
            for pipe in (self.process.stdin, self.process.stdout):
                if pipe is not None:
                    pipe.close()
            if self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)


def launch(
    binary: str | None = None,
    data_dir: str | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    timeout: float = 30.0,
    log: bool = False,
) -> Launched:
    """Starts a node agent and returns once it serves (or raises, leaving nothing behind)."""
    binary = binary or os.environ.get("AGENTPLANE_BIN") or "agentplane"
    own_data_dir = tempfile.mkdtemp(prefix="agentplane-sdk-") if data_dir is None else None
    command = [
        binary, "node-agent",
        "--listen", "127.0.0.1:0",
        "--token-stdin",
        # Its stdin stays open: when this program goes, however it goes (SIGKILL too),
        # the pipe closes and the node agent stops with all it ran.
        "--stop-with-stdin",
        "--announce-ready",
        "--data-dir", data_dir or own_data_dir or "",
        *args,
    ]
    token = secrets.token_hex(24)
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if log else subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            # A process group of its own, so that stopping it can reach all of it.
            start_new_session=True,
        )
    except OSError as error:
        if own_data_dir is not None:
            shutil.rmtree(own_data_dir, ignore_errors=True)
        raise RuntimeError(f"could not run {binary}: {error} (set AGENTPLANE_BIN, or pass binary=)") from error
    launched = Launched("", token, process, own_data_dir)
    atexit.register(launched.stop)
    try:
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(f"{token}\n".encode())
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it died before reading its token: its exit says why
        launched.base_url = _ready_line(process, timeout, binary)
    except BaseException:
        launched.stop()
        raise
    return launched


def _ready_line(process: subprocess.Popen[bytes], timeout: float, binary: str) -> str:
    """Waits for `ready http://...` on the child's stdout, then reads on in a thread, so
    that a stray write never blocks the node agent."""
    lines: queue.Queue[bytes] = queue.Queue()
    stdout = process.stdout
    assert stdout is not None

    def read() -> None:
        for line in stdout:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=read, name="agentplane-node-agent-stdout", daemon=True).start()
    try:
        while True:
            line = lines.get(timeout=timeout)
            if line == b"":
                code = process.wait()
                why = f"signal {-code}" if code < 0 else f"exit code {code}"
                raise RuntimeError(f"{binary} node-agent exited before serving ({why}); pass log=True to see why")
            words = line.decode("utf-8", "replace").split()
            if len(words) >= 2 and words[0] == "ready" and words[1].startswith("http"):
                return words[1]
    except queue.Empty:
        raise TimeoutError(f"{binary} node-agent did not serve within {timeout} s") from None


def _exited(pid: int, timeout: float | None) -> bool:
    """Waits until the child has exited, without reaping it (its pid stays its own)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True  # reaped already
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
