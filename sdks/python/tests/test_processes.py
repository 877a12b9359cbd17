"""Processes and terminals, sync and asyncio, against the real node agent on loopback."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest

from agentplane import AgentPlane, AsyncAgentPlane, Terminal, TerminalClosed, TerminalExit, TerminalGap, models

from helpers import BINARY, CuttableProxy, wait_for

BASH = ["--norc", "--noprofile"]


def read_until(term: Terminal, pattern: bytes, seen: bytearray) -> None:
    """Reads the terminal into `seen` until `pattern` matches what was read (20 s at most)."""
    while not re.search(pattern, seen):
        chunk = term.read(timeout=20)
        assert chunk, f"the terminal ended before {pattern!r}: {bytes(seen[-400:])!r}"
        seen += chunk


def all_output(plane: AgentPlane, id: str) -> bytes:
    """Everything the node agent holds of a process's output, from offset 0."""
    parts = []
    offset = 0
    while True:
        chunk = plane.processes.output(id, offset=offset, encoding="base64")
        assert chunk.gap is None, "nothing was lost in the ring"
        parts.append(base64.b64decode(chunk.data))
        if chunk.data == "" and chunk.status == "exited":
            return b"".join(parts)
        offset = chunk.next_offset


def test_create_list_get_input_output_by_offset_signal_stop(plane: AgentPlane) -> None:
    cat = plane.processes.create("cat", stdin=True, tag="sdk-cat")
    assert cat.status == "running" and cat.pid > 0
    assert [p.id for p in plane.processes.list(tag="sdk-cat")] == [cat.id]
    assert plane.processes.list(tag="nobody") == []
    assert plane.processes.get("sdk-cat").id == cat.id, "get by tag"

    plane.processes.input(cat.id, "hello\n")
    plane.processes.input(cat.id, bytes([0xFF, 0x00, 0x0A]))  # not UTF-8: sent base64
    seen = wait_for(
        "cat's echo",
        lambda: (c := plane.processes.output(cat.id, offset=0, encoding="base64", wait=5)).next_offset >= 9
        and base64.b64decode(c.data),
    )
    assert seen == b"hello\n\xff\x00\n"
    assert plane.processes.output(cat.id, offset=6).offset == 6, "read from a byte offset"

    plane.processes.input(cat.id, "", eof=True)
    ended = wait_for("cat to end at EOF", lambda: (p := plane.processes.get(cat.id)).status == "exited" and p)
    assert ended.exit_code == 0

    # The long poll answers when output comes, not at its end.
    late = plane.processes.create("sh", ["-c", "read line; echo late-$line"], stdin=True)
    plane.processes.input(late.id, "one\n")
    chunk = plane.processes.output(late.id, offset=0, wait=20)
    assert chunk.data == "late-one\n"

    both = plane.processes.create("sh", ["-c", "echo out1; sleep 0.3; echo err1 >&2; sleep 0.3; echo out2"])
    frames = wait_for("both streams to the end", lambda: (o := plane.processes.interleaved(both.id, seq=0, wait=5)).eof and o.frames)
    assert [(f.stream, f.data) for f in frames] == [("stdout", "out1\n"), ("stderr", "err1\n"), ("stdout", "out2\n")]

    sleeper = plane.processes.create("sleep", ["100"])
    plane.processes.signal(sleeper.id, "SIGINT")
    interrupted = wait_for("sleep to die of SIGINT", lambda: (p := plane.processes.get(sleeper.id)).status == "exited" and p)
    assert interrupted.signal == "SIGINT"

    # Stopped only once the shell says it ignores SIGTERM: a stop that came before its
    # `trap` ran ended it with SIGTERM.
    stubborn = plane.processes.create("sh", ["-c", "trap '' TERM; echo trapped; sleep 100"])
    wait_for("the shell to ignore SIGTERM", lambda: "trapped" in plane.processes.output(stubborn.id, offset=0, wait=5).data)
    stopped = plane.processes.stop(stubborn.id, timeout=0.2)
    assert (stopped.status, stopped.signal) == ("exited", "SIGKILL")
    plane.processes.stop(stubborn.id, purge=True)
    with pytest.raises(Exception, match="process_not_found|not found"):
        plane.processes.get(stubborn.id)


def test_a_terminal_computes_resizes_signals_and_ends_with_the_exit(plane: AgentPlane) -> None:
    shell = plane.processes.create("bash", BASH, pty={"rows": 24, "cols": 80})
    seen = bytearray()
    with plane.processes.terminal(shell.id) as term:
        term.write("echo $((6*7))\n")
        read_until(term, rb"[\r\n]42\r\n", seen)

        term.resize(33, 101)
        term.write("stty size\n")
        read_until(term, rb"[\r\n]33 101\r\n", seen)
        plane.processes.resize(shell.id, 40, 120)  # the REST resize reaches the same terminal
        assert plane.processes.get(shell.id).size is not None
        term.write("stty size\n")
        read_until(term, rb"[\r\n]40 120\r\n", seen)

        term.write("sleep 100\n")
        wait_for("sleep in the foreground", lambda: foreground_is(shell.pid, "sleep"))
        term.signal("SIGINT")
        term.write("echo status=$?\n")
        read_until(term, rb"[\r\n]status=130\r\n", seen)

        term.write("exit 3\n")
        rest = b"".join(term)  # iterating ends with the program
        assert term.exit == TerminalExit(exit_code=3, signal=None)
        assert b"exit" in rest or term.exit is not None
        with pytest.raises(TerminalClosed):
            term.write("x")


def foreground_is(shell_pid: int, name: str) -> bool:
    """Whether a child of the shell named `name` holds the terminal's foreground."""
    from pathlib import Path

    for task in Path(f"/proc/{shell_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            stat = Path(f"/proc/{child}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if stat[stat.index("(") + 1 : stat.rindex(")")] == name and fields[2] == fields[5]:
                return True  # its process group is the terminal's foreground group
    return False


def test_a_dropped_connection_resumes_from_the_last_byte(plane: AgentPlane, proxy_to: Callable[..., CuttableProxy]) -> None:
    proxy = proxy_to(plane.base_url)
    with AgentPlane.connect(proxy.url, plane.token) as client:
        dropped_connection_resumes(plane, client, proxy)


def dropped_connection_resumes(plane: AgentPlane, client: AgentPlane, proxy: CuttableProxy) -> None:
    lines = 40_000
    program = client.processes.create("bash", [*BASH, "-c", f'for i in $(seq 1 {lines}); do echo "line $i"; done'], pty={"rows": 24, "cols": 80})
    received = bytearray()
    cuts = [60_000, 200_000]
    with client.processes.terminal(program.id, offset=0) as term:
        for chunk in term:
            assert term.offset == len(received) + len(chunk), "each chunk starts where the last ended"
            received += chunk
            if cuts and len(received) >= cuts[0]:
                cuts.pop(0)
                proxy.cut()  # mid-output, twice
    assert cuts == [], "both cuts happened while output was arriving"
    assert term.exit == TerminalExit(0, None)
    assert proxy.connections >= 6, f"tickets and sockets went through the proxy ({proxy.connections})"
    assert term.gaps == []
    printed = all_output(plane, program.id)
    assert bytes(received) == printed, "the very bytes the program printed, nothing lost or repeated"
    numbers = [int(l[5:]) for l in received.decode().split("\r\n") if l.startswith("line ")]
    assert numbers == list(range(1, lines + 1))


def test_reconnect_and_an_offset_resume_bytes_no_longer_held_are_a_gap(tmp_path: object) -> None:
    with AgentPlane.start(binary=BINARY, args=["--output-buffer-bytes", "4096"]) as plane:
        seq = plane.processes.create("seq", ["1", "20000"])
        wait_for("seq to end", lambda: plane.processes.get(seq.id).status == "exited")
        total = plane.processes.get(seq.id).output_offset
        gaps: list[TerminalGap] = []
        with plane.processes.terminal(seq.id, offset=0, on_gap=gaps.append) as term:
            data = b"".join(term)
        assert term.exit == TerminalExit(0, None)
        assert gaps == [TerminalGap(0, total - 4096)] == term.gaps
        expected = "".join(f"{i}\n" for i in range(1, 20001)).encode()
        assert data == expected[total - 4096 :]

        # A live shell, reconnected on purpose, then a second client from a saved offset.
        shell = plane.processes.create("bash", BASH, pty={"rows": 24, "cols": 80})
        seen = bytearray()
        with plane.processes.terminal(shell.id) as live:
            live.write("echo one-$((1+1))\n")
            read_until(live, rb"one-2\r\n", seen)
            saved = live.offset
            assert saved is not None
            live.reconnect()
            live.write("echo two-$((2+2))\n")  # written after the drop: sent on the next connection
            read_until(live, rb"two-4\r\n", seen)
            assert seen.count(b"one-2\r\n") == 1, "nothing repeated"
        with plane.processes.terminal(shell.id, offset=saved) as later:
            again = bytearray()
            read_until(later, rb"two-4\r\n", again)
            assert b"one-2" not in again, "from the offset given, not before"


async def test_an_asyncio_terminal_computes_and_resumes(aplane: AsyncAgentPlane, proxy_to: Callable[..., CuttableProxy]) -> None:
    shell = await aplane.processes.create("bash", BASH, pty={"rows": 24, "cols": 80})
    async with aplane.processes.terminal(shell.id) as term:
        await term.write("echo $((6*7))\n")
        seen = b""
        async for chunk in term:
            seen += chunk
            if re.search(rb"[\r\n]42\r\n", seen):
                break
        await term.resize(30, 90)
        await term.write("stty size; exit 5\n")
        async for chunk in term:
            seen += chunk
        assert re.search(rb"[\r\n]30 90\r\n", seen)
        assert term.exit == TerminalExit(5, None)

    proxy = proxy_to(aplane.base_url)
    client = AsyncAgentPlane.connect(proxy.url, aplane.token)
    seq = await client.processes.create("seq", ["1", "50000"])
    received = bytearray()
    cut = False
    async with client.processes.terminal(seq.id, offset=0) as term:
        async for chunk in term:
            received += chunk
            if not cut and len(received) > 50_000:
                cut = True
                proxy.cut()
    await client.close()
    assert cut and term.exit == TerminalExit(0, None)
    assert bytes(received) == "".join(f"{i}\n" for i in range(1, 50001)).encode()


def test_lifecycle_events_follow_the_stream_across_a_cut_from_an_event_id(
    plane: AgentPlane, proxy_to: Callable[..., CuttableProxy]
) -> None:
    proxy = proxy_to(plane.base_url)
    sleeper = plane.processes.create("sleep", ["30"])
    seen: list[tuple[int, str, str]] = []
    with AgentPlane.connect(proxy.url, plane.token) as client:
        # From id 0: every event of this node agent's run, so none is missed by starting late.
        for event in client.process_events(last_event_id=0):
            assert isinstance(event, models.LifecycleEvent), event
            seen.append((event.sequence, event.type, event.process.id))
            if event.type == "process.created":
                proxy.cut()  # what follows happens after the cut: on the next connection
                plane.processes.stop(sleeper.id, purge=True)
            if event.type == "process.deleted":
                break
    assert seen[0][1] == "process.created" and seen[-1][1] == "process.deleted"
    assert "process.exited" in [kind for _, kind, _ in seen]
    assert {id for _, _, id in seen} == {sleeper.id}
    sequences = [sequence for sequence, _, _ in seen]
    assert sequences == list(range(sequences[0], sequences[0] + len(sequences))), "once each, in order"
    assert proxy.connections >= 2
