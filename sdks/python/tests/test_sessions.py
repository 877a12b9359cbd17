"""Sessions with the mock agent: permission asked and answered, questions, interrupt,
and the event stream followed across dropped connections, sync and asyncio."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from helpers import CuttableProxy

from agentplane import AgentPlane, AgentPlaneError, AsyncAgentPlane, EventGap, SessionStreamEvent, models


def test_a_conversation_its_permission_answered_followed_while_the_stream_is_dropped_twice(
    plane: AgentPlane, proxy_to: Callable[..., CuttableProxy]
) -> None:
    proxy = proxy_to(plane.base_url)
    session = plane.sessions.create("mock", id="sdk-mock", label="sdk test")
    assert (session.id, session.agent) == ("sdk-mock", "mock")
    assert [s.id for s in plane.sessions.list()] == ["sdk-mock"]

    plane.sessions.send(session.id, "ask permission to run echo sdk-tool-ran")
    received: list[SessionStreamEvent] = []
    cut_at = {3, 8}
    pending: list[str] = []
    turns = 0
    # Only the event stream goes through the proxy, so its connections count reconnects.
    with AgentPlane.connect(proxy.url, plane.token) as follower:
        for event in follower.sessions.events(session.id):
            received.append(event)
            assert not isinstance(event, EventGap), f"no gap: {event}"
            if event.sequence in cut_at:
                cut_at.discard(event.sequence)
                proxy.cut()
            if event.type == "permission.requested":
                pending = [p.id for p in plane.sessions.get(session.id).pending_permissions]
                plane.sessions.reply_permission(session.id, event.data.id, "once")
            elif event.type == "turn.ended":
                turns += 1
                if turns == 1:
                    plane.sessions.send(session.id, "and now a plain answer")
                else:
                    plane.sessions.end(session.id)
    assert cut_at == set(), "both cuts happened mid-stream"
    assert proxy.connections >= 3, f"the stream was reopened after each cut ({proxy.connections})"

    sequences = [e.sequence for e in received if not isinstance(e, EventGap)]
    assert sequences == list(range(1, len(received) + 1)), "every sequence once, in order, no gap"
    assert received[-1].type == "session.ended"
    requested = next(e for e in received if isinstance(e, models.PermissionRequestedEvent))
    assert requested.data.id.startswith("perm-") and pending == [requested.data.id]
    resolved = next(e for e in received if isinstance(e, models.PermissionResolvedEvent))
    assert (resolved.data.id, resolved.data.reply) == (requested.data.id, "once")
    completed = [e.data.item for e in received if isinstance(e, models.ItemCompletedEvent)]
    assert any("sdk-tool-ran" in (item.output or "") for item in completed), "the tool ran once allowed"
    ended = plane.sessions.get(session.id)
    assert (ended.state, ended.turns_completed, ended.last_sequence) == ("ended", 2, sequences[-1])

    # From an offset: what follows it, ending after session.ended as before.
    tail = [e.sequence for e in plane.sessions.events(session.id, offset=len(sequences) - 3) if not isinstance(e, EventGap)]
    assert tail == sequences[-3:]
    # Past the end of an ended session: nothing, and the iterator ends instead of waiting.
    assert list(plane.sessions.events(session.id, offset=len(sequences))) == []
    page = plane.sessions.read_events(session.id, offset=2, limit=3)
    assert [e.sequence for e in page.events] == [3, 4, 5] and page.has_more


def test_questions_answered_and_declined_interrupt_and_replies_never_asked(plane: AgentPlane) -> None:
    session = plane.sessions.create("mock")
    assert session.id.startswith("session-") and len(session.id) == len("session-") + 16
    plane.sessions.send(session.id, "a question, please")
    plane.sessions.send(session.id, "another question")
    questions: list[models.QuestionRequest] = []
    answers: list[str] = []
    turns = 0
    for event in plane.sessions.events(session.id):
        if event.type == "question.requested":
            questions.append(event.data)
            if len(questions) == 1:
                plane.sessions.reply_question(session.id, event.data.id, [["yes"]])
            else:
                plane.sessions.reject_question(session.id, event.data.id)
        elif event.type == "item.completed" and event.data.item.role == "assistant":
            answers.append(json.dumps(event.data.item.model_dump(mode="json")))
        elif event.type == "turn.ended":
            turns += 1
            if turns == 2:
                break
    assert questions[0].questions[0].question == "Shall the mock go on?"
    assert any('answer: \\"yes\\"' in a for a in answers), answers
    assert any("question rejected" in a for a in answers), answers

    # A reply that names no request the agent made approves nothing.
    with pytest.raises(AgentPlaneError) as unknown:
        plane.sessions.reply_permission(session.id, "turn-1-permission", "always")
    assert (unknown.value.code, unknown.value.status) == ("permission_not_found", 404)
    with pytest.raises(AgentPlaneError) as conflict:
        plane.sessions.reply_question(session.id, questions[0].id, [["no"]])
    assert conflict.value.code == "conflict"

    # Interrupted while it waits for a permission: the turn ends `interrupted`, the
    # request is cancelled, and the agent is ready again in the same conversation.
    last = plane.sessions.get(session.id).last_sequence
    plane.sessions.send(session.id, "ask permission to run true")
    seen: list[str] = []
    for event in plane.sessions.events(session.id, offset=last):
        seen.append(event.type)
        if event.type == "permission.requested":
            plane.sessions.interrupt(session.id)
        elif event.type == "turn.ended":
            assert event.data.status == "interrupted"
        elif event.type == "session.started":
            assert event.data.resumed
            break
    assert "turn.ended" in seen and seen[-1] == "session.started"
    assert plane.sessions.end(session.id).state == "ended"
    with pytest.raises(AgentPlaneError) as ended:
        plane.sessions.restart(session.id)
    assert (ended.value.code, ended.value.status) == ("conflict", 409)


async def test_asyncio_follows_a_conversation_through_drops(
    aplane: AsyncAgentPlane, proxy_to: Callable[..., CuttableProxy]
) -> None:
    proxy = proxy_to(aplane.base_url)
    session = await aplane.sessions.create("mock")
    await aplane.sessions.send(session.id, "ask permission to run echo async-ran")
    sequences: list[int] = []
    async with AsyncAgentPlane.connect(proxy.url, aplane.token) as follower:
        async for event in follower.sessions.events(session.id):
            assert not isinstance(event, EventGap)
            sequences.append(event.sequence)
            if event.sequence in (2, 6):
                proxy.cut()
            if event.type == "permission.requested":
                await aplane.sessions.reply_permission(session.id, event.data.id, "once")
            elif event.type == "turn.ended":
                await aplane.sessions.end(session.id)
    assert sequences == list(range(1, len(sequences) + 1))
    assert proxy.connections >= 3
    assert (await aplane.sessions.get(session.id)).last_sequence == sequences[-1]
    agents = {a.id: a for a in await aplane.agents.list()}
    assert agents["mock"].installed
    assert "default" in (await aplane.agents.modes("mock")).permission_modes
