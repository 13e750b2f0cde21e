"""The live stack comes from the environment: test/interop/python-client.test.ts starts the real gateway, workers and
Temporal dev server, and runs this suite against them (nothing here is mocked)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from durable_sessions import AsyncClient, Client


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run this suite through test/interop/python-client.test.ts", returncode=2)
    return value


@pytest.fixture(scope="session")
def gateway_url() -> str:
    return _env("SESSIONS_GATEWAY_URL")


@pytest.fixture(scope="session")
def api_key() -> str:
    return _env("SESSIONS_GATEWAY_KEY")


@pytest.fixture(scope="session")
def restartable() -> dict[str, str]:
    """How to run a gateway process of our own (for the restart test): its command and environment."""
    process: dict[str, str] = json.loads(_env("SESSIONS_GATEWAY_PROCESS"))
    return process


@pytest.fixture
def client(gateway_url: str, api_key: str) -> Iterator[Client]:
    with Client(gateway_url, api_key) as c:
        yield c


@pytest.fixture
async def aclient(gateway_url: str, api_key: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(gateway_url, api_key) as c:
        yield c


@pytest.fixture
def session_id() -> str:
    return f"py-{uuid.uuid4().hex[:8]}"
