"""The API's types under their own names: unions and literals the generated module
spells inline, and what the streams yield besides the wire's events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, TypeAlias

from pydantic import Field, TypeAdapter

from .models import (
    AgentUnparsedEvent,
    ErrorEvent,
    ItemCompletedEvent,
    ItemDeltaEvent,
    ItemStartedEvent,
    LifecycleEvent,
    PermissionRequestedEvent,
    PermissionResolvedEvent,
    QuestionRequestedEvent,
    QuestionResolvedEvent,
    SessionEndedEvent,
    SessionStartedEvent,
    TurnEndedEvent,
    TurnStartedEvent,
)

UniversalEvent: TypeAlias = Annotated[
    SessionStartedEvent
    | SessionEndedEvent
    | TurnStartedEvent
    | TurnEndedEvent
    | ItemStartedEvent
    | ItemDeltaEvent
    | ItemCompletedEvent
    | PermissionRequestedEvent
    | PermissionResolvedEvent
    | QuestionRequestedEvent
    | QuestionResolvedEvent
    | ErrorEvent
    | AgentUnparsedEvent,
    Field(discriminator="type"),
]
"""One event of a session, discriminated by `type` (`event.type == "item.delta"`)."""

UNIVERSAL_EVENT: TypeAdapter[UniversalEvent] = TypeAdapter(UniversalEvent)

PermissionReply: TypeAlias = Literal["once", "always", "reject"]
PermissionMode: TypeAlias = Literal["default", "plan", "bypass"]
SignalTarget: TypeAlias = Literal["group", "foreground"]
OutputStream: TypeAlias = Literal["stdout", "stderr", "pty"]
OutputEncoding: TypeAlias = Literal["utf8", "base64"]


@dataclass(frozen=True)
class EventGap:
    """Sequences `[start, end)` of a session's events (the wire's `from` and `to`) that
    are lost for good."""

    start: int
    end: int
    type: Literal["gap"] = "gap"


SessionStreamEvent: TypeAlias = UniversalEvent | EventGap
"""What `sessions.events()` yields: universal events, and a gap where some are lost."""


@dataclass(frozen=True)
class ProcessEventGap:
    """Lifecycle events `[start, end)` that the node agent no longer keeps."""

    start: int
    end: int
    type: Literal["gap"] = "gap"


@dataclass(frozen=True)
class ProcessEventReset:
    """The node agent restarted since the id asked for: its numbering started over
    (list the processes again)."""

    reason: str
    latest: int
    type: Literal["reset"] = "reset"


ProcessStreamEvent: TypeAlias = LifecycleEvent | ProcessEventGap | ProcessEventReset
"""What `process_events()` yields."""


@dataclass(frozen=True)
class TerminalExit:
    """How a terminal's program ended, as the terminal's last message says."""

    exit_code: int | None
    signal: str | None


@dataclass(frozen=True)
class TerminalGap:
    """Bytes `[start, end)` of the output that this client will never see (overwritten
    in the node agent's ring)."""

    start: int
    end: int
