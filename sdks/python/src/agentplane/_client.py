"""`AgentPlane`: the sync client of a node agent, its processes and terminals,
sessions, agents, files and the resources of `agentplane up`."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any

from . import _calls, models
from .models import InstallProgress, InstallResult
from ._errors import AgentPlaneError
from ._follow import FollowSpec, follow
from ._http import Call, SyncHttp, T
from ._launch import Launched, launch
from ._sse import SseMessage, SseParser
from ._terminal import ErrorListener, GapListener, Terminal
from ._types import (
    UNIVERSAL_EVENT,
    EventGap,
    OutputEncoding,
    OutputStream,
    PermissionMode,
    PermissionReply,
    ProcessEventGap,
    ProcessEventReset,
    ProcessStreamEvent,
    SessionStreamEvent,
    SignalTarget,
)

FileBody = bytes | str | Iterable[bytes] | IO[bytes]


def env_connection(base_url: str | None, token: str | None) -> tuple[str, str | None]:
    """`base_url` and `token` as given, or else AGENTPLANE_URL and AGENTPLANE_TOKEN (what
    `eval "$(agentplane env --dir DIR)"` sets). A URL given is never paired with the
    environment's token."""
    if base_url is not None:
        return base_url, token
    url = os.environ.get("AGENTPLANE_URL")
    if not url:
        raise ValueError(
            "connect() needs a base_url, or AGENTPLANE_URL (and AGENTPLANE_TOKEN) in the environment: "
            'eval "$(agentplane env --dir DIR)"'
        )
    return url, token if token is not None else (os.environ.get("AGENTPLANE_TOKEN") or None)


def new_session_id() -> str:
    return f"session-{secrets.token_hex(8)}"


def _body(body: FileBody) -> bytes | Iterator[bytes]:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    read = getattr(body, "read", None)
    if callable(read):  # a binary file: read a piece at a time
        return iter(lambda: bytes(read(64 * 1024)), b"")
    return iter(body)


def decode_session_event(message: SseMessage) -> SessionStreamEvent:
    if message.event == "gap":
        value = json.loads(message.data)
        return EventGap(int(value["from"]), int(value["to"]))
    return UNIVERSAL_EVENT.validate_json(message.data)


def decode_process_event(message: SseMessage) -> ProcessStreamEvent:
    value = json.loads(message.data)
    if message.event == "gap":
        return ProcessEventGap(int(value["from"]), int(value["to"]))
    if message.event == "reset":
        return ProcessEventReset(str(value.get("reason", "")), int(value.get("latest", 0)))
    return models.LifecycleEvent.model_validate(value)


def decode_resources(message: SseMessage) -> models.ResourceList | None:
    if message.event != "resources":
        return None
    return models.ResourceList.model_validate_json(message.data)


def install_outcome(message: SseMessage, label: str) -> models.InstallProgress | models.InstallResult | None:
    """One event of an install's progress stream (raises its failure)."""
    if message.event == "install.progress":
        return models.InstallProgress.model_validate_json(message.data)
    if message.event == "install.completed":
        return models.InstallResult.model_validate_json(message.data)
    if message.event == "install.failed":
        raise AgentPlaneError.from_answer(502, "install failed", message.data.encode(), label)
    return None


class _Api:
    def __init__(self, http: SyncHttp) -> None:
        self._http = http

    def _call(self, call: Call[T]) -> T:
        return call.read(self._http.send(call.request))


class AgentPlane:
    """A node agent: its processes and terminals, agents, sessions and files.

        with AgentPlane.start() as plane:                 # a node agent of its own
            ...
        plane = AgentPlane.connect("http://127.0.0.1:2468", token)
        plane = AgentPlane.connect()                      # AGENTPLANE_URL, AGENTPLANE_TOKEN
    """

    def __init__(self, base_url: str, token: str | None = None, *, _launched: Launched | None = None) -> None:
        self._http = SyncHttp(base_url, token)
        self._launched = _launched
        self.processes = Processes(self._http)
        self.sessions = Sessions(self._http)
        self.agents = Agents(self._http)
        self.files = Files(self._http)
        self.resources = Resources(self._http)
        """The resources of `agentplane up`'s store (its embedded node agent serves them)."""

    @classmethod
    def connect(cls, base_url: str | None = None, token: str | None = None) -> AgentPlane:
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
    ) -> AgentPlane:
        """Runs `agentplane node-agent` ($AGENTPLANE_BIN if set, else `agentplane` on the
        PATH, or `binary`) on a free loopback port with a random token given on its
        stdin, and waits until it serves. `close()` (or leaving the `with` block, also
        on an exception) stops it and everything it runs, and removes its temporary
        data directory. `env`: more environment for it and what it runs; `args`: more
        `node-agent` flags; `log=True` lets its log through to stderr."""
        launched = launch(binary, data_dir, env, args, timeout, log)
        plane = cls(launched.base_url, launched.token, _launched=launched)
        try:
            plane.health()
        except BaseException:
            plane.close()
            raise
        return plane

    @staticmethod
    def exchange_code(base_url: str, code: str) -> str:
        """Trades a one-time login code (the `#code=` of the link `agentplane up` prints)
        for a bearer token of the caller's own. Needs no token."""
        http = SyncHttp(base_url, None)
        try:
            call = _calls.exchange_code(code)
            return call.read(http.send(call.request)).token
        finally:
            http.close()

    @property
    def base_url(self) -> str:
        return self._http.base_url

    @property
    def token(self) -> str | None:
        """The bearer token: the one given to `connect()`, or the one `start()` made up."""
        return self._http.token

    @property
    def pid(self) -> int | None:
        """The node agent's process id, when `start()` made it."""
        return None if self._launched is None else self._launched.pid

    def health(self) -> models.Health:
        """Liveness and version (needs no token)."""
        call = _calls.health()
        return call.read(self._http.send(call.request))

    def create_login_code(self) -> models.LoginCode:
        """A one-time login code for `exchange_code`: good once, for 10 minutes."""
        call = _calls.create_login_code()
        return call.read(self._http.send(call.request))

    def process_events(self, last_event_id: int | None = None) -> Iterator[ProcessStreamEvent]:
        """Lifecycle events of every process (`process.created|updated|exited|deleted`),
        from now on or after `last_event_id`, followed across dropped connections until
        the loop breaks."""
        first = [True]

        def open(last: str | None) -> Any:
            if last is None and first[0] and last_event_id is not None:
                last = str(last_event_id)
            first[0] = False
            return _calls.process_events(last)

        return follow(self._http, FollowSpec(open, decode_process_event))

    def close(self) -> None:
        """Closes the connections; for `start()`, stops the node agent and all it runs."""
        try:
            self._http.close()
        finally:
            if self._launched is not None:
                self._launched.stop()

    def __enter__(self) -> AgentPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Processes(_Api):
    """Processes and terminals."""

    def create(
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
        return self._call(_calls.create_process(locals()))

    def list(self, *, tag: str | None = None, pty: bool | None = None, session: str | None = None) -> list[models.ProcessInfo]:
        """All processes, in creation order; `tag`, `pty` and `session` filter."""
        return self._call(_calls.list_processes(tag, pty, session)).processes

    def get(self, id: str) -> models.ProcessInfo:
        """One process, by id (or else by tag: the newest with it)."""
        return self._call(_calls.get_process(id))

    def stop(
        self, id: str, *, signal: str | None = None, timeout: float | None = None, purge: bool | None = None
    ) -> models.ProcessInfo:
        """Stops it: `signal` (default SIGHUP for a terminal, SIGTERM otherwise) to its
        whole process group, SIGKILL after `timeout` seconds; answers once nothing of it
        is left. `purge` also forgets it."""
        return self._call(_calls.stop_process(id, signal, timeout, purge))

    def signal(self, id: str, signal: str, *, target: SignalTarget | None = None) -> None:
        """Sends a signal (`SIGINT`, `INT` or `2`) to its group, or (`target="foreground"`)
        to the terminal's foreground job."""
        self._call(_calls.signal_process(id, signal, target))

    def resize(self, id: str, rows: int, cols: int) -> None:
        """Resizes its terminal."""
        self._call(_calls.resize_process(id, rows, cols))

    def input(self, id: str, data: str | bytes, *, eof: bool = False) -> models.ProcessInfo:
        """Writes to its stdin or terminal (bytes go base64-encoded); `eof` closes a
        pipe's stdin after."""
        return self._call(_calls.write_input(id, data, eof))

    def output(
        self,
        id: str,
        *,
        offset: int | None = None,
        stream: OutputStream | None = None,
        limit: int | None = None,
        encoding: OutputEncoding | None = None,
        wait: float | None = None,
    ) -> models.OutputChunk:
        """Retained output from byte `offset`; `wait` seconds long-polls for more.
        `next_offset` is where to read next; `gap` names bytes no longer held."""
        return self._call(_calls.read_output(id, offset, stream, limit, encoding, wait))

    def interleaved(
        self,
        id: str,
        *,
        seq: int | None = None,
        since: str | None = None,
        limit: int | None = None,
        encoding: OutputEncoding | None = None,
        wait: float | None = None,
    ) -> models.InterleavedOutput:
        """A pipe process's stdout and stderr together, in the order they were read:
        frames from chunk `seq` on (or `since` a time), with `next_seq` to ask for next."""
        query = {"seq": seq, "since": since, "limit": limit, "encoding": encoding, "wait": wait}
        return self._call(_calls.read_interleaved(id, query))

    def terminal(
        self,
        id: str,
        *,
        offset: int | None = None,
        stream: OutputStream | None = None,
        reconnect: bool = True,
        on_gap: GapListener | None = None,
        on_error: ErrorListener | None = None,
    ) -> Terminal:
        """Its terminal (or a pipe's output) over a WebSocket, from `offset` (default:
        the oldest byte the node agent holds). Connects when first used."""
        return Terminal(
            self._http, id, offset=offset, stream=stream, reconnect=reconnect, on_gap=on_gap, on_error=on_error
        )


class Sessions(_Api):
    """Conversations with agents."""

    def create(
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
        """Starts a session; without an `id`, one is made up."""
        fields = dict(locals())
        del fields["self"], fields["id"]
        return self._call(_calls.create_session(id or new_session_id(), fields))

    def list(self) -> list[models.SessionInfo]:
        return self._call(_calls.list_sessions()).sessions

    def get(self, id: str) -> models.SessionInfo:
        """Its state, counters, and pending permissions and questions."""
        return self._call(_calls.get_session(id))

    def send(self, id: str, message: str) -> models.SessionInfo:
        """Queues a message: each runs as one turn, in order."""
        return self._call(_calls.send_message(id, message))

    def interrupt(self, id: str) -> models.SessionInfo:
        """Cuts the turn under way short (it ends `interrupted`); the agent starts again
        in the same conversation, ready for the next message. Nothing to interrupt
        changes nothing."""
        return self._call(_calls.interrupt_session(id))

    def end(self, id: str) -> models.SessionInfo:
        """Ends it: `session.ended` is its last event."""
        return self._call(_calls.end_session(id))

    def restart(self, id: str, *, env: Mapping[str, str] | None = None) -> models.SessionInfo:
        """Restarts its agent in the same conversation: a live session's between turns,
        a failed one at once; `env` replaces its environment from then on."""
        return self._call(_calls.restart_session(id, env))

    def reply_permission(self, id: str, request_id: str, reply: PermissionReply) -> None:
        """Answers a permission request (`perm-…` from `permission.requested`):
        `"once"`, `"always"` or `"reject"`."""
        self._call(_calls.reply_permission(id, request_id, reply))

    def reply_question(self, id: str, question_id: str, answers: Sequence[Sequence[str]]) -> None:
        """Answers a question: one list of chosen answers per question asked."""
        self._call(_calls.reply_question(id, question_id, answers))

    def reject_question(self, id: str, question_id: str) -> None:
        """Declines to answer a question."""
        self._call(_calls.reject_question(id, question_id))

    def read_events(self, id: str, *, offset: int | None = None, limit: int | None = None) -> models.SessionEvents:
        """One page of events with a sequence above `offset` (`has_more` says whether to read on)."""
        return self._call(_calls.read_events(id, offset, limit))

    def diff(self, id: str) -> str:
        """A git workspace's changes against the commit it was cloned at."""
        return self._call(_calls.session_diff(id))

    def events(self, id: str, *, offset: int | None = None) -> Iterator[SessionStreamEvent]:
        """Its universal events after sequence `offset` (default: from the first), as they
        happen. A dropped connection is resumed by `Last-Event-ID`, so every sequence
        arrives once and in order; an `EventGap` names sequences lost for good. Ends
        after `session.ended` (or when the loop breaks)."""
        last = [offset or 0]

        def decode(message: SseMessage) -> SessionStreamEvent:
            event = decode_session_event(message)
            if not isinstance(event, EventGap):
                last[0] = event.sequence
            return event

        def ended_cleanly() -> bool:
            # The stream ends by itself only after `session.ended`: an end without it is
            # a dropped connection, unless the session ended before the offset asked for.
            session = self.get(id)
            return session.state == "ended" and session.last_sequence <= last[0]

        spec: FollowSpec[SessionStreamEvent] = FollowSpec(
            lambda last_id: _calls.session_events(id, offset, last_id),
            decode,
            lambda event: event.type == "session.ended",
        )
        return follow(self._http, spec, ended_cleanly)


class Agents(_Api):
    """The agents the node agent can drive."""

    def list(self) -> list[models.AgentInfo]:
        return self._call(_calls.list_agents()).agents

    def get(self, agent: str) -> models.AgentInfo:
        return self._call(_calls.get_agent(agent))

    def modes(self, agent: str) -> models.AgentModes:
        """Its agent modes and the permission modes it takes."""
        return self._call(_calls.agent_modes(agent))

    def models(self, agent: str) -> models.AgentModels:
        """The models a session of it may name."""
        return self._call(_calls.agent_models(agent))

    def install(
        self,
        agent: str,
        *,
        version: str | None = None,
        reinstall: bool | None = None,
        on_progress: Callable[[InstallProgress], None] | None = None,
    ) -> InstallResult:
        """Installs its CLI from the npm registry (the pinned version unless `version`);
        the same version again is a no-op unless `reinstall`. `on_progress` gets each
        step as the node agent streams it."""
        call = _calls.install_agent(agent, version, reinstall, on_progress is not None)
        if on_progress is None:
            return self._call(call)
        with self._http.stream(call.request) as response:
            parser = SseParser()
            for chunk in response.iter_bytes():
                for message in parser.feed(chunk):
                    outcome = install_outcome(message, call.request.label)
                    if isinstance(outcome, models.InstallProgress):
                        on_progress(outcome)
                    elif outcome is not None:
                        return outcome
        raise AgentPlaneError.from_answer(502, "install failed", b"the stream ended before the install did", call.request.label)


class Files(_Api):
    """The node agent's files (`/v1/fs/*`), confined to its roots (`--fs-root`, by
    default its working directory). A relative path is taken against the first root."""

    def list(self, path: str) -> models.FsEntries:
        """A directory's entries, by name."""
        return self._call(_calls.list_entries(path))

    def stat(self, path: str) -> models.FsEntry:
        """One entry, as `lstat` sees it (a symlink is reported as one, with its target)."""
        return self._call(_calls.stat_entry(path))

    def read(self, path: str, *, start: int | None = None, end: int | None = None, last: int | None = None) -> bytes:
        """A file's bytes: all, bytes `start` to `end` (inclusive), or the `last` N."""
        return b"".join(self.stream(path, start=start, end=end, last=last))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def stream(
        self, path: str, *, start: int | None = None, end: int | None = None, last: int | None = None
    ) -> Iterator[bytes]:
        """A file's bytes as they arrive, without holding the whole file."""
        request = _calls.read_file(path, _calls.range_header(start, end, last))
        with self._http.stream(request) as response:
            yield from response.iter_bytes()

    def write(self, path: str, body: FileBody, *, mode: int | None = None, parents: bool | None = None) -> models.FsEntry:
        """Writes a file (bytes, text as UTF-8, an iterable of bytes or a binary file):
        streamed into a temporary file beside it, which then replaces it at once, so a
        reader sees the old file or the new one, never a mix. `mode` like `0o644`."""
        return self._call(_calls.write_file(path, _body(body), mode, parents))

    def mkdir(self, path: str) -> models.FsEntry:
        """Makes a directory and its missing parents (nothing to do when it is one already)."""
        return self._call(_calls.make_directory(path))

    def move(self, source: str, target: str, *, overwrite: bool = False) -> models.FsEntry:
        """Moves (renames) an entry; `overwrite` replaces what is at `target`."""
        return self._call(_calls.move_entry(source, target, overwrite))

    def delete(self, path: str, *, recursive: bool | None = None) -> None:
        """Deletes an entry; a non-empty directory only with `recursive`."""
        self._call(_calls.delete_entry(path, recursive))

    def upload(self, path: str, tar: FileBody) -> models.FsUploadResult:
        """Unpacks a tar into the directory `path` (made when missing)."""
        return self._call(_calls.upload_tar(path, _body(tar)))

    def download(self, path: str) -> Iterator[bytes]:
        """A directory (entries relative to it) or one file, as a tar stream."""
        with self._http.stream(_calls.download_tar(path)) as response:
            yield from response.iter_bytes()

    def watch(self, path: str, *, recursive: bool = True) -> Iterator[models.FsEvent]:
        """Changes under `path` (`created`, `modified`, `removed`, `renamed`), in order,
        until the loop breaks. When the connection drops, a `gap` event says so and the
        watch starts again (list the directory to catch up)."""
        connections = [0]

        def opened() -> models.FsEvent | None:
            # Changes are not kept for a later reader: every connection after the first
            # is announced as a gap.
            connections[0] += 1
            return models.FsEvent(type="gap", path=path) if connections[0] > 1 else None

        def decode(message: SseMessage) -> models.FsEvent | None:
            return models.FsEvent.model_validate_json(message.data) if message.data else None

        spec = FollowSpec(lambda last: _calls.watch_files(path, recursive), decode, opened=opened)
        return follow(self._http, spec)


class Resources(_Api):
    """The resources of `agentplane up`'s store (Processes, Sessions, Sandboxes,
    templates and pools) and the files it did not take. A node agent not embedded in
    `up` answers `not_found`."""

    def list(self) -> models.ResourceList:
        """The whole list now: `resources`, `file_errors` and the store's `revision`."""
        return self._call(_calls.list_resources())

    def watch(self) -> Iterator[models.ResourceList]:
        """The whole list at once, then again each time anything in it changes, followed
        across dropped connections (a reconnect yields the list as it is then)."""
        return follow(self._http, FollowSpec(lambda last: _calls.resource_events(), decode_resources))
