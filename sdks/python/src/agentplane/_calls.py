"""Every route as a `Call` (request + how to read the answer): built here once, made
by `SyncHttp` for `AgentPlane` and by `AsyncHttp` for `AsyncAgentPlane`."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from . import models
from ._http import CALL_SECONDS, STREAM_TIMEOUT, Call, Request, parse
from ._types import OutputEncoding, OutputStream, PermissionReply, SignalTarget

M = TypeVar("M", bound=BaseModel)


def _model(model: type[M]) -> Any:
    return lambda response: parse(model, response)


def _none(response: httpx.Response) -> None:
    return None


def body(model: type[BaseModel], fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` (snake_case, None meaning unset) as the wire spells them, by the request
    model's aliases. Not validated here: the node agent's own answer to a bad value
    (`invalid_request`, naming the field) is the one to give."""
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "self" or value is None:
            continue
        info = model.model_fields.get(name)
        if info is None:
            raise TypeError(f"{model.__name__} has no field {name}")
        out[info.alias or name] = _wire(value)
    return out


def _wire(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, Mapping):
        return {key: _wire(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_wire(item) for item in value]
    return value


def _waiting(seconds: float | None) -> httpx.Timeout:
    """A call's timeout, for a call that the server holds `seconds` before answering."""
    return httpx.Timeout(CALL_SECONDS + (seconds or 0), connect=10.0)


def call(method: str, path: str, model: type[M], **request: Any) -> Call[M]:
    return Call(Request(method, path, **request), _model(model))


def call_none(method: str, path: str, **request: Any) -> Call[None]:
    return Call(Request(method, path, **request), _none)


# Processes


def create_process(fields: Mapping[str, Any]) -> Call[models.ProcessInfo]:
    return call("POST", "/v1/processes", models.ProcessInfo, json=body(models.CreateProcessRequest, fields))


def list_processes(tag: str | None, pty: bool | None, session: str | None) -> Call[models.ProcessList]:
    return call("GET", "/v1/processes", models.ProcessList, query={"tag": tag, "pty": pty, "session": session})


def get_process(id: str) -> Call[models.ProcessInfo]:
    return call("GET", "/v1/processes/{id}", models.ProcessInfo, params={"id": id})


def stop_process(id: str, signal: str | None, timeout: float | None, purge: bool | None) -> Call[models.ProcessInfo]:
    query = {"signal": signal, "timeout": timeout, "purge": purge}
    # The answer comes once nothing of the process is left: after `timeout` at worst.
    wait = _waiting(timeout)
    return call("DELETE", "/v1/processes/{id}", models.ProcessInfo, params={"id": id}, query=query, timeout=wait)


def signal_process(id: str, signal: str, target: SignalTarget | None) -> Call[None]:
    payload = body(models.SignalRequest, {"signal": signal, "target": target})
    return call_none("POST", "/v1/processes/{id}/signal", params={"id": id}, json=payload)


def resize_process(id: str, rows: int, cols: int) -> Call[None]:
    # Not checked here: the node agent's own answer to a bad size is the one to give.
    return call_none("POST", "/v1/processes/{id}/resize", params={"id": id}, json={"rows": rows, "cols": cols})


def write_input(id: str, data: str | bytes, eof: bool) -> Call[models.ProcessInfo]:
    payload: dict[str, Any]
    if isinstance(data, str):
        payload = {"data": data}
    else:
        payload = {"data": base64.b64encode(data).decode(), "base64": True}
    if eof:
        payload["eof"] = True
    return call("POST", "/v1/processes/{id}/input", models.ProcessInfo, params={"id": id}, json=payload)


def read_output(
    id: str,
    offset: int | None,
    stream: OutputStream | None,
    limit: int | None,
    encoding: OutputEncoding | None,
    wait: float | None,
) -> Call[models.OutputChunk]:
    query = {"offset": offset, "stream": stream, "limit": limit, "encoding": encoding, "wait": wait}
    timeout = _waiting(wait)
    return call("GET", "/v1/processes/{id}/output", models.OutputChunk, params={"id": id}, query=query, timeout=timeout)


def read_interleaved(id: str, query: Mapping[str, Any]) -> Call[models.InterleavedOutput]:
    timeout = _waiting(query.get("wait"))
    return call(
        "GET", "/v1/processes/{id}/output/interleaved", models.InterleavedOutput, params={"id": id}, query=query, timeout=timeout
    )


def issue_ticket(id: str) -> Call[models.Ticket]:
    return call("POST", "/v1/processes/{id}/ticket", models.Ticket, params={"id": id})


def process_events(last_event_id: str | None) -> Request:
    headers = {"accept": "text/event-stream"}
    if last_event_id is not None:
        headers["last-event-id"] = last_event_id
    return Request("GET", "/v1/events/sse", headers=headers, timeout=STREAM_TIMEOUT)


# Sessions


def create_session(id: str, fields: Mapping[str, Any]) -> Call[models.SessionInfo]:
    payload = body(models.CreateSessionRequest, fields)
    return call("POST", "/v1/sessions/{id}", models.SessionInfo, params={"id": id}, json=payload)


def list_sessions() -> Call[models.SessionList]:
    return call("GET", "/v1/sessions", models.SessionList)


def get_session(id: str) -> Call[models.SessionInfo]:
    return call("GET", "/v1/sessions/{id}", models.SessionInfo, params={"id": id})


def send_message(id: str, message: str) -> Call[models.SessionInfo]:
    return call("POST", "/v1/sessions/{id}/messages", models.SessionInfo, params={"id": id}, json={"message": message})


def interrupt_session(id: str) -> Call[models.SessionInfo]:
    return call("POST", "/v1/sessions/{id}/interrupt", models.SessionInfo, params={"id": id})


def end_session(id: str) -> Call[models.SessionInfo]:
    return call("DELETE", "/v1/sessions/{id}", models.SessionInfo, params={"id": id})


def restart_session(id: str, env: Mapping[str, str] | None) -> Call[models.SessionInfo]:
    payload = None if env is None else {"env": dict(env)}
    return call("POST", "/v1/sessions/{id}/restart", models.SessionInfo, params={"id": id}, json=payload)


def reply_permission(id: str, request_id: str, reply: PermissionReply) -> Call[None]:
    return call_none(
        "POST", "/v1/sessions/{id}/permissions/{pid}/reply", params={"id": id, "pid": request_id}, json={"reply": reply}
    )


def reply_question(id: str, question_id: str, answers: Sequence[Sequence[str]]) -> Call[None]:
    payload = {"answers": [list(answer) for answer in answers]}
    return call_none("POST", "/v1/sessions/{id}/questions/{qid}/reply", params={"id": id, "qid": question_id}, json=payload)


def reject_question(id: str, question_id: str) -> Call[None]:
    return call_none("POST", "/v1/sessions/{id}/questions/{qid}/reject", params={"id": id, "qid": question_id})


def read_events(id: str, offset: int | None, limit: int | None) -> Call[models.SessionEvents]:
    query = {"offset": offset, "limit": limit}
    return call("GET", "/v1/sessions/{id}/events", models.SessionEvents, params={"id": id}, query=query)


def session_diff(id: str) -> Call[str]:
    request = Request("GET", "/v1/sessions/{id}/diff", params={"id": id}, headers={"accept": "text/x-diff"}, timeout=STREAM_TIMEOUT)
    return Call(request, lambda response: response.text)


def session_events(id: str, offset: int | None, last_event_id: str | None) -> Request:
    headers = {"accept": "text/event-stream"}
    query: dict[str, Any] = {}
    if last_event_id is not None:
        headers["last-event-id"] = last_event_id
    elif offset is not None:
        query["offset"] = offset
    return Request("GET", "/v1/sessions/{id}/events/sse", params={"id": id}, query=query, headers=headers, timeout=STREAM_TIMEOUT)


# Agents


def list_agents() -> Call[models.AgentList]:
    return call("GET", "/v1/agents", models.AgentList)


def get_agent(agent: str) -> Call[models.AgentInfo]:
    return call("GET", "/v1/agents/{agent}", models.AgentInfo, params={"agent": agent})


def agent_modes(agent: str) -> Call[models.AgentModes]:
    return call("GET", "/v1/agents/{agent}/modes", models.AgentModes, params={"agent": agent})


def agent_models(agent: str) -> Call[models.AgentModels]:
    return call("GET", "/v1/agents/{agent}/models", models.AgentModels, params={"agent": agent})


def install_agent(agent: str, version: str | None, reinstall: bool | None, progress: bool) -> Call[models.InstallResult]:
    payload = body(models.InstallRequest, {"version": version, "reinstall": reinstall})
    headers = {"accept": "text/event-stream"} if progress else {}
    return call(
        "POST", "/v1/agents/{agent}/install", models.InstallResult,
        params={"agent": agent}, json=payload, headers=headers, timeout=STREAM_TIMEOUT,
    )


# Resources and logins


def list_resources() -> Call[models.ResourceList]:
    return call("GET", "/v1/resources", models.ResourceList)


def resource_events() -> Request:
    return Request("GET", "/v1/resources/sse", headers={"accept": "text/event-stream"}, timeout=STREAM_TIMEOUT)


def health() -> Call[models.Health]:
    return call("GET", "/v1/health", models.Health)


def create_login_code() -> Call[models.LoginCode]:
    return call("POST", "/v1/auth/codes", models.LoginCode)


def exchange_code(code: str) -> Call[models.BrowserToken]:
    return call("POST", "/v1/auth/exchange", models.BrowserToken, json={"code": code})


# Files


def list_entries(path: str) -> Call[models.FsEntries]:
    return call("GET", "/v1/fs/entries", models.FsEntries, query={"path": path})


def stat_entry(path: str) -> Call[models.FsEntry]:
    return call("GET", "/v1/fs/stat", models.FsEntry, query={"path": path})


def range_header(start: int | None, end: int | None, last: int | None) -> dict[str, str]:
    if last is not None:
        if start is not None or end is not None:
            raise ValueError("give either last, or start (and end)")
        return {"range": f"bytes=-{last}"}
    if start is None and end is None:
        return {}
    return {"range": f"bytes={start or 0}-{'' if end is None else end}"}


def read_file(path: str, range: Mapping[str, str]) -> Request:
    headers = {"accept": "application/octet-stream", **range}
    return Request("GET", "/v1/fs/file", query={"path": path}, headers=headers, timeout=STREAM_TIMEOUT)


def write_file(path: str, content: Any, mode: int | None, parents: bool | None) -> Call[models.FsEntry]:
    query = {"path": path, "mode": None if mode is None else format(mode, "04o"), "parents": parents}
    if isinstance(content, str):
        content = content.encode()
    return call(
        "PUT", "/v1/fs/file", models.FsEntry,
        query=query, content=content, content_type="application/octet-stream", timeout=STREAM_TIMEOUT,
    )


def make_directory(path: str) -> Call[models.FsEntry]:
    return call("POST", "/v1/fs/mkdir", models.FsEntry, query={"path": path})


def move_entry(source: str, target: str, overwrite: bool) -> Call[models.FsEntry]:
    return call("POST", "/v1/fs/move", models.FsEntry, json={"from": source, "to": target, "overwrite": overwrite})


def delete_entry(path: str, recursive: bool | None) -> Call[None]:
    return call_none("DELETE", "/v1/fs/entry", query={"path": path, "recursive": recursive})


def upload_tar(path: str, content: Any) -> Call[models.FsUploadResult]:
    return call(
        "POST", "/v1/fs/upload", models.FsUploadResult,
        query={"path": path}, content=content, content_type="application/x-tar", timeout=STREAM_TIMEOUT,
    )


def download_tar(path: str) -> Request:
    return Request("GET", "/v1/fs/download", query={"path": path}, headers={"accept": "application/x-tar"}, timeout=STREAM_TIMEOUT)


def watch_files(path: str, recursive: bool) -> Request:
    query = {"path": path, "recursive": recursive}
    return Request("GET", "/v1/fs/watch", query=query, headers={"accept": "text/event-stream"}, timeout=STREAM_TIMEOUT)
