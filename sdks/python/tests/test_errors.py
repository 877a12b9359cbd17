"""Every failure is an AgentPlaneError carrying the problem document, or an
AgentPlaneNetworkError when there was no answer at all."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from agentplane import AgentPlane, AgentPlaneError, AgentPlaneNetworkError, AsyncAgentPlane


def test_problem_documents_an_unknown_process_a_bad_token_malformed_input(plane: AgentPlane) -> None:
    with pytest.raises(AgentPlaneError) as caught:
        plane.processes.get("no-such-process")
    unknown = caught.value
    assert unknown.type == "urn:agentplane:error:process_not_found"
    assert unknown.code == "process_not_found"
    assert unknown.status == 404
    assert unknown.title
    assert "no-such-process" in unknown.detail
    assert unknown.request == "GET /v1/processes/no-such-process"
    assert str(unknown).startswith("GET /v1/processes/no-such-process: 404 ")

    sleeper = plane.processes.create("sleep", ["30"])
    with AgentPlane.connect(plane.base_url, "not-the-token") as stranger:
        with pytest.raises(AgentPlaneError) as refused:
            stranger.processes.list()
        assert (refused.value.type, refused.value.status) == ("urn:agentplane:error:unauthorized", 401)
        assert stranger.health().status == "ok", "health alone answers without the token"
        # A terminal with a bad token fails at its ticket, and says so.
        with pytest.raises(AgentPlaneError) as ticket:
            stranger.processes.terminal(sleeper.id).connect()
        assert ticket.value.code == "unauthorized"

    with pytest.raises(AgentPlaneError) as bad_size:
        plane.processes.resize(sleeper.id, 0, 0)
    assert (bad_size.value.code, bad_size.value.status) == ("invalid_request", 400)
    with pytest.raises(AgentPlaneError, match="stdin") as closed:
        plane.processes.input(sleeper.id, "x")
    assert closed.value.code == "stdin_closed"
    with pytest.raises(AgentPlaneError) as bad_signal:
        plane.processes.signal(sleeper.id, "SIGNOPE")
    assert bad_signal.value.code == "invalid_request"
    # Resources are agentplane up's: a plain node agent has none.
    with pytest.raises(AgentPlaneError) as resources:
        plane.resources.list()
    assert (resources.value.code, resources.value.status) == ("not_found", 404)
    # An id in a path is encoded whole, never a path of its own.
    with pytest.raises(AgentPlaneError) as traversal:
        plane.processes.get("../sessions")
    assert traversal.value.code == "process_not_found"


async def test_the_same_from_asyncio(aplane: AsyncAgentPlane) -> None:
    with pytest.raises(AgentPlaneError) as caught:
        await aplane.processes.get("no-such-process")
    assert (caught.value.code, caught.value.status) == ("process_not_found", 404)
    assert caught.value.request == "GET /v1/processes/no-such-process"
    with pytest.raises(AgentPlaneError) as session:
        await aplane.sessions.send("no-such-session", "hello")
    assert session.value.code == "session_not_found"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_no_answer_at_all_is_a_network_error_not_an_api_error() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with AgentPlane.connect(nowhere, "whatever-token") as remote, pytest.raises(AgentPlaneNetworkError) as caught:
        remote.processes.list()
    assert not isinstance(caught.value, AgentPlaneError)
    assert caught.value.request == "GET /v1/processes"
    assert caught.value.__cause__ is not None, "the transport's error is kept"
    async with AsyncAgentPlane.connect(nowhere, "whatever-token") as aremote:
        with pytest.raises(AgentPlaneNetworkError):
            await aremote.sessions.list()
    with pytest.raises(ValueError):
        AgentPlane.connect("ftp://x")


@pytest.fixture
def bad_gateway() -> Iterator[str]:
    """A proxy in front of nothing that fails on its own, in HTML."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                client.recv(65536)
                client.sendall(
                    b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ncontent-length: 21\r\n"
                    b"connection: close\r\n\r\n<h1>bad gateway</h1>\n"
                )

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_an_answer_that_is_no_problem_document_still_becomes_an_agentplane_error(bad_gateway: str) -> None:
    with AgentPlane.connect(bad_gateway, "whatever-token") as remote, pytest.raises(AgentPlaneError) as caught:
        remote.sessions.list()
    assert (caught.value.status, caught.value.type) == (502, "about:blank")
    assert "bad gateway" in caught.value.detail
