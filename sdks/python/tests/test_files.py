"""The node agent's files: bytes both ways, ranges, listings, moves, tars, watches,
and paths that lead out refused."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path

import pytest

from agentplane import AgentPlane, AgentPlaneError, AsyncAgentPlane


def test_write_read_list_stat_move_delete(plane: AgentPlane, tmp_path: Path) -> None:
    files = plane.files
    created = files.write("notes/todo.md", "ship it\n", parents=True, mode=0o600)
    assert (created.path, created.size, created.mode) == (str(tmp_path / "notes/todo.md"), 8, 0o600)
    assert (tmp_path / "notes/todo.md").read_text() == "ship it\n"
    assert files.read_text("notes/todo.md") == "ship it\n"

    data = bytes(range(256)) * 4096  # 1 MiB, every byte value, streamed both ways
    files.write("big.bin", iter([data[: len(data) // 2], data[len(data) // 2 :]]))
    assert files.read("big.bin") == data
    assert files.read("big.bin", start=0, end=9) == data[:10]
    assert files.read("big.bin", start=len(data) - 5) == data[-5:]
    assert files.read("big.bin", last=3) == data[-3:]
    assert b"".join(files.stream("big.bin")) == data
    files.write("from-file.bin", io.BytesIO(b"from a file object"))
    assert files.read("from-file.bin") == b"from a file object"

    assert [e.name for e in files.list(".").entries] == ["big.bin", "from-file.bin", "notes"]
    assert files.stat("notes").type == "directory"
    os.symlink("todo.md", tmp_path / "notes/link")
    assert files.stat("notes/link").target == "todo.md"

    files.mkdir("a/b/c")
    moved = files.move("notes/todo.md", "a/b/c/done.md")
    assert moved.path.endswith("a/b/c/done.md")
    with pytest.raises(AgentPlaneError) as conflict:
        files.move("big.bin", "a/b/c/done.md")
    assert conflict.value.code == "conflict"
    files.move("big.bin", "a/b/c/done.md", overwrite=True)
    with pytest.raises(AgentPlaneError) as not_empty:
        files.delete("a")
    assert not_empty.value.code == "directory_not_empty"
    files.delete("a", recursive=True)
    assert not (tmp_path / "a").exists()
    with pytest.raises(AgentPlaneError) as missing:
        files.read("a/b/c/done.md")
    assert missing.value.status == 404


def test_tars_up_and_down_keep_modes_and_links(plane: AgentPlane) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, mode, body in [("run.sh", 0o755, b"#!/bin/sh\necho hi\n"), ("secret", 0o600, b"s")]:
            info = tarfile.TarInfo(name)
            info.mode, info.size = mode, len(body)
            tar.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("link")
        link.type, link.linkname = tarfile.SYMTYPE, "run.sh"
        tar.addfile(link)
    result = plane.files.upload("unpacked", buffer.getvalue())
    assert result.entries >= 3
    assert plane.files.stat("unpacked/run.sh").mode == 0o755
    assert plane.files.stat("unpacked/secret").mode == 0o600
    assert plane.files.stat("unpacked/link").target == "run.sh"
    back = tarfile.open(fileobj=io.BytesIO(b"".join(plane.files.download("unpacked"))))
    members = {m.name.removeprefix("./"): m for m in back.getmembers()}
    assert members["run.sh"].mode & 0o777 == 0o755
    assert members["link"].issym() and members["link"].linkname == "run.sh"


def test_paths_that_lead_out_are_refused_with_the_servers_problem(plane: AgentPlane, tmp_path: Path) -> None:
    os.symlink("/etc", tmp_path / "etc-link")
    for path in ["../outside", "/etc/passwd", "etc-link/hostname"]:
        with pytest.raises(AgentPlaneError) as caught:
            plane.files.read(path)
        assert caught.value.code == "forbidden_path", path
    with pytest.raises(AgentPlaneError) as write:
        plane.files.write("etc-link/agentplane-was-here", "x")
    assert write.value.code == "forbidden_path"


def test_watch_sees_a_write_a_rewrite_a_rename_and_a_remove_in_order(plane: AgentPlane) -> None:
    plane.files.mkdir("watched")
    seen: list[str] = []
    events = plane.files.watch("watched")
    # The watch is in place once its answer starts, which the first event proves: until
    # one is seen, write fresh probe files from another thread.
    first_seen = threading.Event()

    def probe() -> None:
        i = 0
        while not first_seen.wait(0.05):
            plane.files.write(f"watched/probe-{i}", "p")
            i += 1

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        first = next(events)
    finally:
        first_seen.set()
        prober.join()
    assert first.type == "created"
    plane.files.write("watched/file.txt", "one")
    plane.files.write("watched/file.txt", "two")
    plane.files.move("watched/file.txt", "watched/renamed.txt")
    plane.files.delete("watched/renamed.txt")
    for event in events:
        if "probe" not in event.path:
            seen.append(f"{event.type} {Path(event.path).name}")
        if event.type == "removed" and "probe" not in event.path:
            break
    assert seen == ["created file.txt", "modified file.txt", "renamed renamed.txt", "removed renamed.txt"]


async def test_asyncio_files(aplane: AsyncAgentPlane) -> None:
    await aplane.files.write("a.txt", b"hi")
    assert await aplane.files.read("a.txt") == b"hi"

    async def pieces():  # type: ignore[no-untyped-def]
        yield b"streamed "
        yield b"up"

    await aplane.files.write("b.txt", pieces())
    assert await aplane.files.read_text("b.txt") == "streamed up"
    assert [e.name for e in (await aplane.files.list(".")).entries] == ["a.txt", "b.txt"]
    with pytest.raises(AgentPlaneError) as caught:
        await aplane.files.read("../x")
    assert caught.value.code == "forbidden_path"
