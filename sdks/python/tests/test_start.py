"""start(): a node agent of the program's own, and nothing of it left once the `with`
block ends (also by an exception), nor when the program ends without closing it;
connect() from the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import BINARY, ROOT, alive, wait_for

from agentplane import AgentPlane, AgentPlaneError, AsyncAgentPlane


def arg_of(pid: int, flag: str) -> str:
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return args[args.index(flag.encode()) + 1].decode()


def test_the_with_block_stops_the_node_agent_and_all_it_ran_even_on_an_exception() -> None:
    pids: list[int] = []
    data_dir = ""
    with pytest.raises(RuntimeError, match="the program failed"):
        with AgentPlane.start(binary=BINARY) as plane:
            assert plane.pid is not None and alive(plane.pid)
            assert plane.base_url.startswith("http://127.0.0.1:")
            assert plane.token is not None and len(plane.token) == 48
            # The token went in on stdin: it is in no command line and no environment.
            assert plane.token.encode() not in Path(f"/proc/{plane.pid}/cmdline").read_bytes()
            assert plane.token.encode() not in Path(f"/proc/{plane.pid}/environ").read_bytes()
            data_dir = arg_of(plane.pid, "--data-dir")
            assert Path(data_dir).is_dir()
            sleeper = plane.processes.create("sleep", ["1000"])
            shell = plane.processes.create("bash", ["--norc"], pty={"rows": 24, "cols": 80})
            pids = [plane.pid, sleeper.pid, shell.pid]
            assert all(alive(pid) for pid in pids)
            raise RuntimeError("the program failed")
    assert [pid for pid in pids if alive(pid)] == [], "no process left in /proc"
    assert not Path(data_dir).exists(), "the temporary data directory is gone"
    plane.close()  # twice is harmless


def test_a_program_that_ends_without_closing_takes_its_node_agent_and_processes_with_it() -> None:
    program = f"""
import json
from agentplane import AgentPlane
plane = AgentPlane.start(binary={BINARY!r})
p = plane.processes.create("sleep", ["1000"])
print(json.dumps({{"agent": plane.pid, "sleeper": p.pid}}), flush=True)
raise SystemExit("the program failed")
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 1 and "the program failed" in run.stderr, run.stderr
    pids = json.loads(run.stdout)
    wait_for("the node agent and its sleep to be gone", lambda: not alive(pids["agent"]) and not alive(pids["sleeper"]))


def test_a_program_killed_with_sigkill_takes_its_node_agent_and_processes_with_it() -> None:
    # No atexit runs for SIGKILL: the node agent's stdin, a pipe from the program,
    # closes with it (--stop-with-stdin).
    program = f"""
import json, time
from agentplane import AgentPlane
plane = AgentPlane.start(binary={BINARY!r})
p = plane.processes.create("sleep", ["1000"])
print(json.dumps({{"agent": plane.pid, "sleeper": p.pid}}), flush=True)
time.sleep(600)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, env=env) as child:
        try:
            assert child.stdout is not None
            pids = json.loads(child.stdout.readline())
            assert alive(pids["agent"]) and alive(pids["sleeper"])
        finally:
            child.kill()
    wait_for("the node agent and its sleep to be gone", lambda: not alive(pids["agent"]) and not alive(pids["sleeper"]))


def test_start_says_why_when_the_binary_cannot_serve() -> None:
    with pytest.raises(RuntimeError, match="could not run /nonexistent/agentplane"):
        AgentPlane.start(binary="/nonexistent/agentplane")
    with pytest.raises(RuntimeError, match="exited before serving"):
        AgentPlane.start(binary=BINARY, args=["--max-sessions", "0"])


def test_connect_reads_agentplane_url_and_token_as_agentplane_env_sets_them(
    plane: AgentPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTPLANE_URL", raising=False)
    monkeypatch.delenv("AGENTPLANE_TOKEN", raising=False)
    with pytest.raises(ValueError, match="AGENTPLANE_URL"):
        AgentPlane.connect()
    monkeypatch.setenv("AGENTPLANE_URL", plane.base_url)
    monkeypatch.setenv("AGENTPLANE_TOKEN", plane.token or "")
    made = plane.processes.create("true")
    with AgentPlane.connect() as from_env:
        assert from_env.token == plane.token
        assert made.id in [p.id for p in from_env.processes.list()]
        assert from_env.pid is None
    # A URL given is never sent the environment's token.
    with AgentPlane.connect(plane.base_url) as named:
        assert named.token is None
        with pytest.raises(AgentPlaneError) as refused:
            named.processes.list()
        assert refused.value.code == "unauthorized"


async def test_asyncio_start_stops_it_all_too() -> None:
    async with AsyncAgentPlane.start(binary=BINARY) as plane:
        sleeper = await plane.processes.create("sleep", ["1000"])
        pids = [plane.pid, sleeper.pid]
        assert all(pid is not None and alive(pid) for pid in pids)
    assert [pid for pid in pids if pid is not None and alive(pid)] == []
    # Awaited instead of entered: closed by hand.
    plane = await AsyncAgentPlane.start(binary=BINARY)
    assert (await plane.health()).status == "ok"
    await plane.close()
    assert plane.pid is not None and not alive(plane.pid)
