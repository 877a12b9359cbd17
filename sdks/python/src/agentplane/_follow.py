"""Following an SSE stream across dropped connections, sync and asyncio: each
reconnect sends `Last-Event-ID` (the id of the last event delivered), so nothing is
missed or repeated. Network failures and 5xx (or 429) answers are retried with a
back-off that resets once an event arrives; any other error answer is raised."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from ._errors import AgentPlaneError, AgentPlaneNetworkError
from ._http import AsyncHttp, Request, SyncHttp
from ._sse import SseMessage, SseParser

T = TypeVar("T")

FIRST_DELAY = 0.1
MAX_DELAY = 5.0


@dataclass
class FollowSpec(Generic[T]):
    """How a resuming stream is opened, read and known to be over."""

    open: Callable[[str | None], Request]
    """The request, given the id of the last event received, if any."""
    decode: Callable[[SseMessage], T | None]
    """The item an SSE message stands for, or None to skip it."""
    is_last: Callable[[T], bool] = lambda item: False
    """True for the last item of the stream: nothing is read after it."""
    opened: Callable[[], T | None] = lambda: None
    """An item to give each time a connection opens, if any."""


def retriable(error: BaseException) -> bool:
    """Worth another try: no answer, a broken body, or the server (or a proxy) failing."""
    if isinstance(error, AgentPlaneError):
        return error.status >= 500 or error.status == 429
    return isinstance(error, AgentPlaneNetworkError)


def follow(
    http: SyncHttp, spec: FollowSpec[T], ended_cleanly: Callable[[], bool] | None = None
) -> Iterator[T]:
    """The items of the stream, reconnecting after each drop, until the last item,
    `ended_cleanly()` says an end without it was the end, or the caller stops."""
    last_event_id: str | None = None
    delay = FIRST_DELAY
    while True:
        try:
            with http.stream(spec.open(last_event_id)) as response:
                # A body cut off mid-read raises AgentPlaneNetworkError out of `stream`.
                parser = SseParser()
                first = spec.opened()
                if first is not None:
                    yield first
                for chunk in response.iter_bytes():
                    for message in parser.feed(chunk):
                        if message.id:
                            last_event_id = message.id
                        item = spec.decode(message)
                        if item is None:
                            continue
                        delay = FIRST_DELAY
                        yield item
                        if spec.is_last(item):
                            return
                for message in parser.close():
                    if message.id:
                        last_event_id = message.id
                    item = spec.decode(message)
                    if item is not None:
                        yield item
                        if spec.is_last(item):
                            return
            if ended_cleanly is not None and ended_cleanly():
                return
        except (AgentPlaneError, AgentPlaneNetworkError) as error:
            if not retriable(error):
                raise
        time.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)


async def afollow(
    http: AsyncHttp, spec: FollowSpec[T], ended_cleanly: Callable[[], Awaitable[bool]] | None = None
) -> AsyncIterator[T]:
    """`follow`, for asyncio."""
    last_event_id: str | None = None
    delay = FIRST_DELAY
    while True:
        try:
            async with http.stream(spec.open(last_event_id)) as response:
                parser = SseParser()
                first = spec.opened()
                if first is not None:
                    yield first
                async for chunk in response.aiter_bytes():
                    for message in parser.feed(chunk):
                        if message.id:
                            last_event_id = message.id
                        item = spec.decode(message)
                        if item is None:
                            continue
                        delay = FIRST_DELAY
                        yield item
                        if spec.is_last(item):
                            return
                for message in parser.close():
                    if message.id:
                        last_event_id = message.id
                    item = spec.decode(message)
                    if item is not None:
                        yield item
                        if spec.is_last(item):
                            return
            if ended_cleanly is not None and await ended_cleanly():
                return
        except (AgentPlaneError, AgentPlaneNetworkError) as error:
            if not retriable(error):
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_DELAY)
