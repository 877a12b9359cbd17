"""agentplane: a typed client for the agentplane node agent (processes and terminals,
agent sessions and their event streams, files), sync (`AgentPlane`) and asyncio
(`AsyncAgentPlane`). The wire models are in `agentplane.models`, generated from the
node agent's own OpenAPI document."""

from . import models
from ._async_client import AsyncAgentPlane, AsyncAgents, AsyncFiles, AsyncProcesses, AsyncResources, AsyncSessions
from ._client import AgentPlane, Agents, Files, Processes, Resources, Sessions
from ._errors import AgentPlaneError, AgentPlaneNetworkError
from ._terminal import AsyncTerminal, Terminal, TerminalClosed
from ._types import (
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
    TerminalExit,
    TerminalGap,
    UniversalEvent,
)

__version__ = "0.1.0"

__all__ = [
    "AgentPlane",
    "AgentPlaneError",
    "AgentPlaneNetworkError",
    "Agents",
    "AsyncAgentPlane",
    "AsyncAgents",
    "AsyncFiles",
    "AsyncProcesses",
    "AsyncResources",
    "AsyncSessions",
    "AsyncTerminal",
    "EventGap",
    "Files",
    "OutputEncoding",
    "OutputStream",
    "PermissionMode",
    "PermissionReply",
    "ProcessEventGap",
    "ProcessEventReset",
    "ProcessStreamEvent",
    "Processes",
    "Resources",
    "SessionStreamEvent",
    "Sessions",
    "SignalTarget",
    "Terminal",
    "TerminalClosed",
    "TerminalExit",
    "TerminalGap",
    "UniversalEvent",
    "models",
]
