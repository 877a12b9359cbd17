"""The fixtures: a node agent of the test's own (sync or asyncio) and cuttable proxies."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import BINARY, CuttableProxy

from agentplane import AgentPlane, AsyncAgentPlane


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[AgentPlane]:
    """A node agent for one test, its file root the test's own folder."""
    with AgentPlane.start(binary=BINARY, args=["--fs-root", str(tmp_path)]) as plane:
        yield plane


@pytest.fixture
async def aplane(tmp_path: Path) -> AsyncIterator[AsyncAgentPlane]:
    async with AsyncAgentPlane.start(binary=BINARY, args=["--fs-root", str(tmp_path)]) as plane:
        yield plane


@pytest.fixture
def proxy_to() -> Iterator[Callable[..., CuttableProxy]]:
    made: list[CuttableProxy] = []

    def make(target: str, watch: Callable[[dict[str, Any], bytes], bool] | None = None) -> CuttableProxy:
        proxy = CuttableProxy(target, watch)
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()
