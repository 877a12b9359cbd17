"""How it must be shown: the README's programs (examples/), installed from the built
wheel into a fresh virtual environment, run as a user runs them, against the real
binary. Each runs twice: with a node agent of its own (after which nothing it started
may be left running), and connected through a proxy that drops its event stream
mid-way (after which its events must still have arrived in order, each once).

The wheel is $AGENTPLANE_SDK_WHEEL (scripts/test.sh builds it), else built here."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import BINARY, ROOT, CuttableProxy

from agentplane import AgentPlane

EXAMPLES = ["quickstart.py", "quickstart_async.py"]
CHILD_TIMEOUT = 60


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with only the wheel (and what it depends on) installed."""
    scratch = tmp_path_factory.mktemp("wheel-venv")
    wheel = os.environ.get("AGENTPLANE_SDK_WHEEL")
    if not wheel:
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(scratch / "dist"), str(ROOT)],
            check=True, capture_output=True,
        )
        (wheel_path,) = (scratch / "dist").glob("agentplane-*.whl")
        wheel = str(wheel_path)
    venv.create(scratch / "venv", with_pip=True)
    python = scratch / "venv" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel],
        check=True, timeout=300,
    )
    return python


def run_example(python: Path, name: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTPLANE_", "PYTHON"))}
    run = subprocess.run(
        [str(python), str(ROOT / "examples" / name)],
        cwd=cwd, env={**base, "AGENTPLANE_BIN": BINARY, **env},
        capture_output=True, text=True, timeout=CHILD_TIMEOUT,
    )
    assert run.returncode == 0, f"{name}: exit {run.returncode}\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
    return run


def check_tour(output: str) -> list[int]:
    """What every run of the tour prints; returns the event sequences, as printed."""
    lines = output.splitlines()
    assert "terminal: 42" in lines, output
    assert "terminal exited: TerminalExit(exit_code=0, signal=None)" in lines, output
    assert "file: hi" in lines, output
    assert "error: process_not_found 404" in lines, output
    assert not any("are lost" in line for line in lines), output
    events = [re.fullmatch(r"event (\d+) ([a-z.]+)", line) for line in lines if line.startswith("event ")]
    assert all(events), output
    sequences = [int(m.group(1)) for m in events if m]
    types = [m.group(2) for m in events if m]
    assert sequences == list(range(1, len(sequences) + 1)), f"every event once, in order:\n{output}"
    assert "permission.requested" in types and "permission.resolved" in types, output
    assert types[-1] == "session.ended", output
    return sequences


def marked(mark: str) -> list[int]:
    """The live processes whose environment holds `mark`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if mark.encode() in (proc / "environ").read_bytes() and (proc / "stat").read_text().split(") ")[1][0] not in "ZX":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_the_readme_shows_the_examples_as_they_are() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in EXAMPLES:
        source = (ROOT / "examples" / name).read_text()
        assert f"```python\n{source}```\n" in readme, f"README.md does not show examples/{name} as it is"


@pytest.mark.parametrize("name", EXAMPLES)
def test_with_a_node_agent_of_its_own_and_nothing_left_after(fresh_python: Path, tmp_path: Path, name: str) -> None:
    # Everything the example starts inherits this variable: the node agent, the shell,
    # the sleep it leaves running on purpose, the mock agent.
    mark = f"AGENTPLANE_EXAMPLE_MARK={secrets.token_hex(8)}"
    key, value = mark.split("=")
    run = run_example(fresh_python, name, tmp_path, {key: value})
    check_tour(run.stdout)
    assert marked(mark) == [], "nothing the example started is still running"
    assert list(tmp_path.iterdir()) == [], "the file it wrote is gone, and no data directory is left"


def test_the_repositorys_readme_program_runs_as_shown(fresh_python: Path, tmp_path: Path) -> None:
    readme = (ROOT / "../../README.md").read_text()
    section = readme.split("## From a program: the Python SDK", 1)[1]
    program = section.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "program.py").write_text(program)
    mark = f"AGENTPLANE_EXAMPLE_MARK={secrets.token_hex(8)}"
    key, value = mark.split("=")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTPLANE_", "PYTHON"))}
    run = subprocess.run(
        [str(fresh_python), "program.py"], cwd=tmp_path, env={**base, "AGENTPLANE_BIN": BINARY, key: value},
        capture_output=True, text=True, timeout=CHILD_TIMEOUT,
    )
    assert run.returncode == 0, run.stderr
    assert marked(mark) == []


class EventStreamCutter:
    """A proxy policy: reset a connection carrying an event stream once it has passed 3
    events on, `times` times in all. Everything else goes through untouched."""

    def __init__(self, times: int) -> None:
        self.left = times

    def __call__(self, state: dict[str, Any], data: bytes) -> bool:
        # A kept-alive connection carries one answer after another: look at the last.
        answer: bytes = state["answer"]
        answer = answer[answer.rfind(b"HTTP/1.1 ") :]
        if self.left == 0 or b"text/event-stream" not in answer.split(b"\r\n\r\n", 1)[0]:
            return False
        if answer.count(b"\nid:") < 3:
            return False
        self.left -= 1
        return True


@pytest.mark.parametrize("name", EXAMPLES)
def test_connected_through_a_proxy_that_drops_the_event_stream(fresh_python: Path, tmp_path: Path, name: str) -> None:
    cutter = EventStreamCutter(times=2)
    with AgentPlane.start(binary=BINARY, args=["--fs-root", str(tmp_path)]) as plane:
        proxy = CuttableProxy(plane.base_url, cutter)
        try:
            run = run_example(
                fresh_python, name, tmp_path, {"AGENTPLANE_URL": proxy.url, "AGENTPLANE_TOKEN": plane.token or ""}
            )
        finally:
            proxy.close()
        sequences = check_tour(run.stdout)
        assert cutter.left == 0, "the event stream was dropped twice while the example read it"
        (session,) = plane.sessions.list()
        assert (session.state, session.last_sequence) == ("ended", sequences[-1])
        assert all(p.status == "exited" for p in plane.processes.list()), "its terminal's program exited"
