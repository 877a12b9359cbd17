"""The hand-written names for what the generated module spells inline agree with it."""

import typing

from pydantic import TypeAdapter

import agentplane
from agentplane import models


def test_universal_event_is_the_union_the_generated_session_events_hold() -> None:
    generated = models.SessionEvents.model_fields["events"].annotation
    (item,) = typing.get_args(generated)
    generated_union, *_ = typing.get_args(item)
    ours, *_ = typing.get_args(agentplane.UniversalEvent)
    assert set(typing.get_args(ours)) == set(typing.get_args(generated_union))


def test_the_literals_are_the_documents_enums() -> None:
    def literal(model: type, field: str) -> set[str]:
        def values(annotation: object) -> set[str]:
            if typing.get_origin(annotation) is typing.Literal:
                return set(typing.get_args(annotation))
            return {v for part in typing.get_args(annotation) for v in values(part)}

        return values(model.model_fields[field].annotation)  # type: ignore[attr-defined]

    assert literal(models.PermissionReplyRequest, "reply") == set(typing.get_args(agentplane.PermissionReply))
    assert literal(models.CreateSessionRequest, "permission_mode") == set(typing.get_args(agentplane.PermissionMode))
    assert literal(models.SignalRequest, "target") == set(typing.get_args(agentplane.SignalTarget))
    assert literal(models.OutputChunk, "stream") == set(typing.get_args(agentplane.OutputStream))


def test_an_event_is_read_as_its_own_class() -> None:
    event = TypeAdapter(agentplane.UniversalEvent).validate_python(
        {
            "sequence": 3, "time": "2026-01-01T00:00:00Z", "sessionId": "s", "source": "agent",
            "type": "item.delta", "data": {"itemId": "i", "delta": "hel"},
        }
    )
    assert isinstance(event, models.ItemDeltaEvent)
    assert event.data.delta == "hel"
