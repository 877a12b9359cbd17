"""The same tour as quickstart.py, with asyncio: `async with`, `async for`, `await`."""

import asyncio
import os
import re

from agentplane import AgentPlaneError, AsyncAgentPlane, EventGap


async def tour(plane: AsyncAgentPlane) -> None:
    shell = await plane.processes.create("bash", ["--norc"], pty={"rows": 24, "cols": 80})
    async with plane.processes.terminal(shell.id) as term:
        await term.write("echo $((6*7))\n")
        screen = b""
        async for chunk in term:
            screen += chunk
            if re.search(rb"[\r\n]42\r\n", screen):
                break
        print("terminal: 42")
        await term.write("exit\n")
        async for chunk in term:
            pass
        print(f"terminal exited: {term.exit}")

    session = await plane.sessions.create("mock")
    await plane.sessions.send(session.id, "ask permission to run echo hi")
    async for event in plane.sessions.events(session.id):
        if isinstance(event, EventGap):
            print(f"events {event.start}..{event.end - 1} are lost")
            continue
        print(f"event {event.sequence} {event.type}")
        if event.type == "permission.requested":
            await plane.sessions.reply_permission(session.id, event.data.id, "once")
        elif event.type == "turn.ended":
            await plane.sessions.end(session.id)

    await plane.files.write("hello.txt", b"hi\n")
    print(f"file: {(await plane.files.read('hello.txt')).decode().strip()}")
    await plane.files.delete("hello.txt")

    try:
        await plane.processes.get("no-such-process")
    except AgentPlaneError as error:
        print(f"error: {error.code} {error.status}")


async def main() -> None:
    if os.environ.get("AGENTPLANE_URL"):
        async with AsyncAgentPlane.connect() as plane:
            await tour(plane)
    else:
        async with AsyncAgentPlane.start() as plane:
            await plane.processes.create("sleep", ["600"])
            await tour(plane)


asyncio.run(main())
