"""The agentplane SDK in one program: a terminal, a conversation with the scripted
`mock` agent, a file, and an error.

Without AGENTPLANE_URL it starts a node agent of its own ($AGENTPLANE_BIN if set, else
`agentplane` on the PATH), which the end of the `with` block stops with all it ran;
with AGENTPLANE_URL (and AGENTPLANE_TOKEN) it uses that one.
"""

import os
import re

from agentplane import AgentPlane, AgentPlaneError, EventGap


def tour(plane: AgentPlane) -> None:
    # A terminal: bash on a pseudo-terminal, over a WebSocket that resumes by offset.
    shell = plane.processes.create("bash", ["--norc"], pty={"rows": 24, "cols": 80})
    with plane.processes.terminal(shell.id) as term:
        term.write("echo $((6*7))\n")
        screen = b""
        for chunk in term:  # bytes, as the program writes them
            screen += chunk
            if re.search(rb"[\r\n]42\r\n", screen):
                break
        print("terminal: 42")
        term.write("exit\n")
        for chunk in term:  # on to the end: the program exits
            pass
        print(f"terminal exited: {term.exit}")

    # A conversation with the mock agent, which asks before it runs a command.
    session = plane.sessions.create("mock")
    plane.sessions.send(session.id, "ask permission to run echo hi")
    for event in plane.sessions.events(session.id):  # resumes after a dropped connection
        if isinstance(event, EventGap):
            print(f"events {event.start}..{event.end - 1} are lost")
            continue
        print(f"event {event.sequence} {event.type}")
        if event.type == "permission.requested":
            plane.sessions.reply_permission(session.id, event.data.id, "once")
        elif event.type == "turn.ended":
            plane.sessions.end(session.id)  # session.ended follows, the last event

    # A file, in the node agent's file root (by default its working directory).
    plane.files.write("hello.txt", b"hi\n")
    print(f"file: {plane.files.read('hello.txt').decode().strip()}")
    plane.files.delete("hello.txt")

    # A failed call is an AgentPlaneError, read from the server's problem document.
    try:
        plane.processes.get("no-such-process")
    except AgentPlaneError as error:
        print(f"error: {error.code} {error.status}")


if os.environ.get("AGENTPLANE_URL"):
    with AgentPlane.connect() as plane:  # AGENTPLANE_URL and AGENTPLANE_TOKEN
        tour(plane)
else:
    with AgentPlane.start() as plane:
        plane.processes.create("sleep", ["600"])  # still running at the end: stopped then
        tour(plane)
