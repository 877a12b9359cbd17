"""`AsyncAgentPlane`: the asyncio client, the same surface as `AgentPlane` with
`await`, `async with` and `async for`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import IO, Any

from . import _calls, models
from .models import InstallProgress, InstallResult
from ._client import (
    decode_process_event,
    decode_resources,
    decode_session_event,
    env_connection,
    install_outcome,
    new_session_id,
)
from ._errors import AgentPlaneError
from ._follow import FollowSpec, afollow
from ._http import AsyncHttp, Call, T
from ._launch import Launched, launch
from ._sse import SseMessage, SseParser
from ._terminal import AsyncTerminal, ErrorListener, GapListener
from ._types import (
    EventGap,
    OutputEncoding,
    OutputStream,
    PermissionMode,
    PermissionReply,
    ProcessStreamEvent,
    SessionStreamEvent,
    SignalTarget,
)

AsyncFileBody = bytes | str | Iterable[bytes] | AsyncIterable[bytes] | IO[bytes]


def _body(body: AsyncFileBody) -> Any:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    read = getattr(body, "read", None)
    if callable(read):  # a binary file: read a piece at a time
        return iter(lambda: bytes(read(64 * 1024)), b"")
    if isinstance(body, AsyncIterable):
        return body
    return iter(body)


class _Api:
    def __init__(self, http: AsyncHttp) -> None:
        self._http = http

    async def _call(self, call: Call[T]) -> T:
        return call.read(await self._http.send(call.request))


class AsyncAgentPlane:
    """A node agent, for asyncio.

        async with AsyncAgentPlane.start() as plane:       # a node agent of its own
            ...
        async with AsyncAgentPlane.connect(url, token) as plane:
            ...
    """

    def __init__(self, base_url: str, token: str | None = None, *, _launched: Launched | None = None) -> None:
        self._http = AsyncHttp(base_url, token)
        self._launched = _launched
        self.processes = AsyncProcesses(self._http)
        self.sessions = AsyncSessions(self._http)
        self.agents = AsyncAgents(self._http)
        self.files = AsyncFiles(self._http)
        self.resources = AsyncResources(self._http)

    @classmethod
    def connect(cls, base_url: str | None = None, token: str | None = None) -> AsyncAgentPlane:
        """A client of a node agent that runs already. Makes no request. Without
        `base_url`: AGENTPLANE_URL and AGENTPLANE_TOKEN."""
        url, token = env_connection(base_url, token)
        return cls(url, token)

    @classmethod
    def start(
        cls,
        *,
        binary: str | None = None,
        data_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        timeout: float = 30.0,
        log: bool = False,
    ) -> _Starting:
        """As `AgentPlane.start()`; use it as `async with AsyncAgentPlane.start() as plane`,
        or `plane = await AsyncAgentPlane.start()` and later `await plane.close()`."""

        async def start() -> AsyncAgentPlane:
            launched = await asyncio.to_thread(launch, binary, data_dir, env, args, timeout, log)
            plane = cls(launched.base_url, launched.token, _launched=launched)
            try:
                await plane.health()
            except BaseException:
                await plane.close()
                raise
            return plane

        return _Starting(start)

    @staticmethod
    async def exchange_code(base_url: str, code: str) -> str:
        """Trades a one-time login code for a bearer token of the caller's own."""
        http = AsyncHttp(base_url, None)
        try:
            call = _calls.exchange_code(code)
            return call.read(await http.send(call.request)).token
        finally:
            await http.close()

    @property
    def base_url(self) -> str:
        return self._http.base_url

    @property
    def token(self) -> str | None:
        return self._http.token

    @property
    def pid(self) -> int | None:
        return None if self._launched is None else self._launched.pid

    async def health(self) -> models.Health:
        call = _calls.health()
        return call.read(await self._http.send(call.request))

    async def create_login_code(self) -> models.LoginCode:
        call = _calls.create_login_code()
        return call.read(await self._http.send(call.request))

    def process_events(self, last_event_id: int | None = None) -> AsyncIterator[ProcessStreamEvent]:
        first = [True]

        def open(last: str | None) -> Any:
            if last is None and first[0] and last_event_id is not None:
                last = str(last_event_id)
            first[0] = False
            return _calls.process_events(last)

        return afollow(self._http, FollowSpec(open, decode_process_event))

    async def close(self) -> None:
        """Closes the connections; for `start()`, stops the node agent and all it runs."""
        try:
            await self._http.close()
        finally:
            if self._launched is not None:
                # Shielded: a cancelled program still stops what it started.
                await asyncio.shield(asyncio.to_thread(self._launched.stop))

    async def __aenter__(self) -> AsyncAgentPlane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Starting:
    """What `AsyncAgentPlane.start()` returns: awaitable, or an async context manager."""

    def __init__(self, start: Callable[[], Awaitable[AsyncAgentPlane]]) -> None:
        self._start = start
        self._plane: AsyncAgentPlane | None = None

    def __await__(self) -> Generator[Any, None, AsyncAgentPlane]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncAgentPlane:
        self._plane = await self._start()
        return self._plane

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._plane is not None:
            await self._plane.close()


class AsyncProcesses(_Api):
    """Processes and terminals."""

    async def create(
        self,
        command: str,
        args: Sequence[str] | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        pty: models.PtySize | Mapping[str, int] | None = None,
        stdin: bool | None = None,
        tag: str | None = None,
        label: str | None = None,
        id: str | None = None,
        session_id: str | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> models.ProcessInfo:
        """Starts a process; `pty={"rows": 24, "cols": 80}` makes it a terminal."""
        return await self._call(_calls.create_process(locals()))

    async def list(
        self, *, tag: str | None = None, pty: bool | None = None, session: str | None = None
    ) -> list[models.ProcessInfo]:
        return (await self._call(_calls.list_processes(tag, pty, session))).processes

    async def get(self, id: str) -> models.ProcessInfo:
        return await self._call(_calls.get_process(id))

    async def stop(
        self, id: str, *, signal: str | None = None, timeout: float | None = None, purge: bool | None = None
    ) -> models.ProcessInfo:
        return await self._call(_calls.stop_process(id, signal, timeout, purge))

    async def signal(self, id: str, signal: str, *, target: SignalTarget | None = None) -> None:
        await self._call(_calls.signal_process(id, signal, target))

    async def resize(self, id: str, rows: int, cols: int) -> None:
        await self._call(_calls.resize_process(id, rows, cols))

    async def input(self, id: str, data: str | bytes, *, eof: bool = False) -> models.ProcessInfo:
        return await self._call(_calls.write_input(id, data, eof))

    async def output(
        self,
        id: str,
        *,
        offset: int | None = None,
        stream: OutputStream | None = None,
        limit: int | None = None,
        encoding: OutputEncoding | None = None,
        wait: float | None = None,
    ) -> models.OutputChunk:
        return await self._call(_calls.read_output(id, offset, stream, limit, encoding, wait))

    async def interleaved(
        self,
        id: str,
        *,
        seq: int | None = None,
        since: str | None = None,
        limit: int | None = None,
        encoding: OutputEncoding | None = None,
        wait: float | None = None,
    ) -> models.InterleavedOutput:
        query = {"seq": seq, "since": since, "limit": limit, "encoding": encoding, "wait": wait}
        return await self._call(_calls.read_interleaved(id, query))

    def terminal(
        self,
        id: str,
        *,
        offset: int | None = None,
        stream: OutputStream | None = None,
        reconnect: bool = True,
        on_gap: GapListener | None = None,
        on_error: ErrorListener | None = None,
    ) -> AsyncTerminal:
        return AsyncTerminal(
            self._http, id, offset=offset, stream=stream, reconnect=reconnect, on_gap=on_gap, on_error=on_error
        )


class AsyncSessions(_Api):
    """Conversations with agents."""

    async def create(
        self,
        agent: str,
        *,
        id: str | None = None,
        agent_mode: str | None = None,
        agent_version: str | None = None,
        permission_mode: PermissionMode | None = None,
        model: str | None = None,
        variant: str | None = None,
        working_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        workspace: models.WorkspaceRequest | Mapping[str, Any] | None = None,
        label: str | None = None,
        mcp_servers: Sequence[models.McpServer | Mapping[str, Any]] | None = None,
    ) -> models.SessionInfo:
        fields = dict(locals())
        del fields["self"], fields["id"]
        return await self._call(_calls.create_session(id or new_session_id(), fields))

    async def list(self) -> list[models.SessionInfo]:
        return (await self._call(_calls.list_sessions())).sessions

    async def get(self, id: str) -> models.SessionInfo:
        return await self._call(_calls.get_session(id))

    async def send(self, id: str, message: str) -> models.SessionInfo:
        return await self._call(_calls.send_message(id, message))

    async def interrupt(self, id: str) -> models.SessionInfo:
        return await self._call(_calls.interrupt_session(id))

    async def end(self, id: str) -> models.SessionInfo:
        return await self._call(_calls.end_session(id))

    async def restart(self, id: str, *, env: Mapping[str, str] | None = None) -> models.SessionInfo:
        return await self._call(_calls.restart_session(id, env))

    async def reply_permission(self, id: str, request_id: str, reply: PermissionReply) -> None:
        await self._call(_calls.reply_permission(id, request_id, reply))

    async def reply_question(self, id: str, question_id: str, answers: Sequence[Sequence[str]]) -> None:
        await self._call(_calls.reply_question(id, question_id, answers))

    async def reject_question(self, id: str, question_id: str) -> None:
        await self._call(_calls.reject_question(id, question_id))

    async def read_events(
        self, id: str, *, offset: int | None = None, limit: int | None = None
    ) -> models.SessionEvents:
        return await self._call(_calls.read_events(id, offset, limit))

    async def diff(self, id: str) -> str:
        return await self._call(_calls.session_diff(id))

    def events(self, id: str, *, offset: int | None = None) -> AsyncIterator[SessionStreamEvent]:
        """As `AgentPlane.sessions.events`, for `async for`."""
        last = [offset or 0]

        def decode(message: SseMessage) -> SessionStreamEvent:
            event = decode_session_event(message)
            if not isinstance(event, EventGap):
                last[0] = event.sequence
            return event

        async def ended_cleanly() -> bool:
            session = await self.get(id)
            return session.state == "ended" and session.last_sequence <= last[0]

        spec: FollowSpec[SessionStreamEvent] = FollowSpec(
            lambda last_id: _calls.session_events(id, offset, last_id),
            decode,
            lambda event: event.type == "session.ended",
        )
        return afollow(self._http, spec, ended_cleanly)


class AsyncAgents(_Api):
    """The agents the node agent can drive."""

    async def list(self) -> list[models.AgentInfo]:
        return (await self._call(_calls.list_agents())).agents

    async def get(self, agent: str) -> models.AgentInfo:
        return await self._call(_calls.get_agent(agent))

    async def modes(self, agent: str) -> models.AgentModes:
        return await self._call(_calls.agent_modes(agent))

    async def models(self, agent: str) -> models.AgentModels:
        return await self._call(_calls.agent_models(agent))

    async def install(
        self,
        agent: str,
        *,
        version: str | None = None,
        reinstall: bool | None = None,
        on_progress: Callable[[InstallProgress], None] | None = None,
    ) -> InstallResult:
        call = _calls.install_agent(agent, version, reinstall, on_progress is not None)
        if on_progress is None:
            return await self._call(call)
        async with self._http.stream(call.request) as response:
            parser = SseParser()
            async for chunk in response.aiter_bytes():
                for message in parser.feed(chunk):
                    outcome = install_outcome(message, call.request.label)
                    if isinstance(outcome, models.InstallProgress):
                        on_progress(outcome)
                    elif outcome is not None:
                        return outcome
        raise AgentPlaneError.from_answer(502, "install failed", b"the stream ended before the install did", call.request.label)


class AsyncFiles(_Api):
    """The node agent's files (`/v1/fs/*`), confined to its roots."""

    async def list(self, path: str) -> models.FsEntries:
        return await self._call(_calls.list_entries(path))

    async def stat(self, path: str) -> models.FsEntry:
        return await self._call(_calls.stat_entry(path))

    async def read(self, path: str, *, start: int | None = None, end: int | None = None, last: int | None = None) -> bytes:
        return b"".join([chunk async for chunk in self.stream(path, start=start, end=end, last=last)])

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def stream(
        self, path: str, *, start: int | None = None, end: int | None = None, last: int | None = None
    ) -> AsyncIterator[bytes]:
        request = _calls.read_file(path, _calls.range_header(start, end, last))
        async with self._http.stream(request) as response:
            async for chunk in response.aiter_bytes():
                yield chunk

    async def write(
        self, path: str, body: AsyncFileBody, *, mode: int | None = None, parents: bool | None = None
    ) -> models.FsEntry:
        return await self._call(_calls.write_file(path, _body(body), mode, parents))

    async def mkdir(self, path: str) -> models.FsEntry:
        return await self._call(_calls.make_directory(path))

    async def move(self, source: str, target: str, *, overwrite: bool = False) -> models.FsEntry:
        return await self._call(_calls.move_entry(source, target, overwrite))

    async def delete(self, path: str, *, recursive: bool | None = None) -> None:
        await self._call(_calls.delete_entry(path, recursive))

    async def upload(self, path: str, tar: AsyncFileBody) -> models.FsUploadResult:
        return await self._call(_calls.upload_tar(path, _body(tar)))

    async def download(self, path: str) -> AsyncIterator[bytes]:
        async with self._http.stream(_calls.download_tar(path)) as response:
            async for chunk in response.aiter_bytes():
                yield chunk

    def watch(self, path: str, *, recursive: bool = True) -> AsyncIterator[models.FsEvent]:
        connections = [0]

        def opened() -> models.FsEvent | None:
            connections[0] += 1
            return models.FsEvent(type="gap", path=path) if connections[0] > 1 else None

        def decode(message: SseMessage) -> models.FsEvent | None:
            return models.FsEvent.model_validate_json(message.data) if message.data else None

        return afollow(self._http, FollowSpec(lambda last: _calls.watch_files(path, recursive), decode, opened=opened))


class AsyncResources(_Api):
    """The resources of `agentplane up`'s store."""

    async def list(self) -> models.ResourceList:
        return await self._call(_calls.list_resources())

    def watch(self) -> AsyncIterator[models.ResourceList]:
        return afollow(self._http, FollowSpec(lambda last: _calls.resource_events(), decode_resources))
