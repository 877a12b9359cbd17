"""The one place requests are made, for the sync and the asyncio client alike: the
base URL, the bearer token, JSON in and out, and every failure turned into
`AgentPlaneError` (an answer) or `AgentPlaneNetworkError` (none)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, TypeAdapter

from ._errors import AgentPlaneError, AgentPlaneNetworkError

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

# A call waits this long for an answer; a long poll waits its `wait` on top, and a
# stream (SSE, a file's body) as long as it lasts.
CALL_SECONDS = 60.0
CALL_TIMEOUT = httpx.Timeout(CALL_SECONDS, connect=10.0)
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)

Body = bytes | str | Iterator[bytes]
AsyncBody = bytes | str | Iterator[bytes] | AsyncIterator[bytes]


@dataclass
class Request:
    """One call: method, path template and its parameters, query, body, headers."""

    method: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    query: Mapping[str, Any] = field(default_factory=dict)
    json: Any = None
    content: Any = None
    content_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: httpx.Timeout = field(default_factory=lambda: CALL_TIMEOUT)

    def filled_path(self) -> str:
        """The path with its `{name}` parameters filled in, each encoded whole."""
        path = self.path
        for name, value in self.params.items():
            if value == "":
                raise ValueError(f"{self.path}: the {name} is empty")
            path = path.replace("{" + name + "}", quote(value, safe=""))
        return path

    @property
    def label(self) -> str:
        return f"{self.method} {self.filled_path()}"


def query_params(query: Mapping[str, Any]) -> dict[str, str]:
    """The query without the unset values, in the server's spelling (`true`, not `True`)."""
    out: dict[str, str] = {}
    for key, value in query.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def parse(model: type[M], response: httpx.Response) -> M:
    return model.model_validate_json(response.content)


def parse_as(adapter: TypeAdapter[T], response: httpx.Response) -> T:
    return adapter.validate_json(response.content)


def check_base_url(base_url: str) -> str:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
    return base_url.rstrip("/")


class _Common:
    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url = check_base_url(base_url)
        self.token = token

    def _build(self, request: Request) -> tuple[str, dict[str, str], dict[str, Any]]:
        headers = {"accept": "application/json", **request.headers}
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        extra: dict[str, Any] = {}
        if request.json is not None:
            headers["content-type"] = "application/json"
            extra["content"] = json.dumps(request.json).encode()
        elif request.content is not None:
            headers["content-type"] = request.content_type or "application/octet-stream"
            extra["content"] = request.content
        if request.query:
            extra["params"] = query_params(request.query)
        return self.base_url + request.filled_path(), headers, extra

    def url(self, request: Request, websocket: bool = False) -> str:
        """The full URL of `request`, its query included; `ws(s)://` for a WebSocket."""
        url = str(httpx.URL(self.base_url + request.filled_path(), params=query_params(request.query)))
        return "ws" + url[len("http") :] if websocket else url


class SyncHttp(_Common):
    def __init__(self, base_url: str, token: str | None) -> None:
        super().__init__(base_url, token)
        self.client = httpx.Client(timeout=CALL_TIMEOUT)

    def send(self, request: Request) -> httpx.Response:
        """Makes the call and returns its 2xx answer, read whole."""
        url, headers, extra = self._build(request)
        try:
            response = self.client.request(request.method, url, headers=headers, timeout=request.timeout, **extra)
        except httpx.TransportError as error:
            raise AgentPlaneNetworkError(request.label, error) from error
        if response.is_error:
            raise AgentPlaneError.from_answer(response.status_code, response.reason_phrase, response.content, request.label)
        return response

    @contextmanager
    def stream(self, request: Request) -> Iterator[httpx.Response]:
        """Makes the call and yields its 2xx answer with the body still to read."""
        url, headers, extra = self._build(request)
        try:
            with self.client.stream(request.method, url, headers=headers, timeout=request.timeout, **extra) as response:
                if response.is_error:
                    body = response.read()
                    raise AgentPlaneError.from_answer(response.status_code, response.reason_phrase, body, request.label)
                yield response
        except httpx.TransportError as error:
            raise AgentPlaneNetworkError(request.label, error) from error

    def close(self) -> None:
        self.client.close()


class AsyncHttp(_Common):
    def __init__(self, base_url: str, token: str | None) -> None:
        super().__init__(base_url, token)
        self.client = httpx.AsyncClient(timeout=CALL_TIMEOUT)

    async def send(self, request: Request) -> httpx.Response:
        url, headers, extra = self._build(request)
        try:
            response = await self.client.request(request.method, url, headers=headers, timeout=request.timeout, **extra)
        except httpx.TransportError as error:
            raise AgentPlaneNetworkError(request.label, error) from error
        if response.is_error:
            raise AgentPlaneError.from_answer(response.status_code, response.reason_phrase, response.content, request.label)
        return response

    @asynccontextmanager
    async def stream(self, request: Request) -> AsyncIterator[httpx.Response]:
        url, headers, extra = self._build(request)
        try:
            async with self.client.stream(request.method, url, headers=headers, timeout=request.timeout, **extra) as response:
                if response.is_error:
                    body = await response.aread()
                    raise AgentPlaneError.from_answer(response.status_code, response.reason_phrase, body, request.label)
                yield response
        except httpx.TransportError as error:
            raise AgentPlaneNetworkError(request.label, error) from error

    async def close(self) -> None:
        await self.client.aclose()


@dataclass(frozen=True)
class Call(Generic[T]):
    """A request and how to read its answer: what the sync and the async client share."""

    request: Request
    read: Callable[[httpx.Response], T]
