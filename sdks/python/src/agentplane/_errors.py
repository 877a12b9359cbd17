"""The two failures a call can end in: an answer that is an error (`AgentPlaneError`,
read from the node agent's RFC 7807 problem document) or no answer at all
(`AgentPlaneNetworkError`)."""

from __future__ import annotations

import json
from typing import Any

PREFIX = "urn:agentplane:error:"


class AgentPlaneError(Exception):
    """A non-2xx answer from the node agent (or from whatever stands in front of it).

    `type` is the stable problem type URN (`urn:agentplane:error:process_not_found`),
    `code` its last part (`process_not_found`, `unauthorized`, `invalid_request`, ...),
    `request` the call that failed (`GET /v1/processes/x`).
    """

    def __init__(self, *, type: str, title: str, status: int, detail: str, request: str) -> None:
        super().__init__(f"{request}: {status} {title}: {detail}")
        self.type = type
        self.title = title
        self.status = status
        self.detail = detail
        self.request = request

    @property
    def code(self) -> str:
        """The part of `type` after `urn:agentplane:error:` (the whole `type` otherwise)."""
        return self.type[len(PREFIX) :] if self.type.startswith(PREFIX) else self.type

    @classmethod
    def from_answer(cls, status: int, reason: str, body: bytes, request: str) -> AgentPlaneError:
        """A problem document when the body is one, else the status and the body's text."""
        text = body.decode("utf-8", "replace")
        problem = parse_problem(text)
        if problem is not None:
            return cls(**problem, request=request)
        return cls(
            type="about:blank",
            title=reason or f"HTTP {status}",
            status=status,
            detail=text[:500] or "(no body)",
            request=request,
        )


class AgentPlaneNetworkError(Exception):
    """The node agent could not be reached, or the connection broke before an answer.

    `__cause__` is the transport's own error; `request` names the call.
    """

    def __init__(self, request: str, cause: BaseException | str) -> None:
        super().__init__(f"{request}: {cause}")
        self.request = request


def parse_problem(text: str) -> dict[str, Any] | None:
    """The fields of a problem document in `text`, when it holds one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    kind, status = value.get("type"), value.get("status")
    if not isinstance(kind, str) or not isinstance(status, int) or isinstance(status, bool):
        return None
    title, detail = value.get("title"), value.get("detail")
    return {
        "type": kind,
        "title": title if isinstance(title, str) else "",
        "status": status,
        "detail": detail if isinstance(detail, str) else "",
    }
