from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
import uuid

import pytest

from durable_sessions import (
    ERROR_CLASSES,
    AsyncClient,
    Client,
    DurableSessionsError,
    Event,
    InvalidInputError,
    InvalidTransitionError,
    SessionAlreadyExistsError,
    SessionClosedError,
    SessionNotFoundError,
    UnauthorizedError,
    UnavailableError,
)


def test_the_whole_flow(client: Client, session_id: str) -> None:
    # snake_case in Python, camelCase on the wire: initial_state is the runtime's initialState.
    session = client.start(session_id, {"kind": "memory", "initial_state": "v1"}, description="from Python")
    status = session.status()
    assert status.phase == "running" and status.runtime is not None and status.runtime.kind == "memory"

    first = session.checkpoint(label="first", idempotency_key="k-1")
    again = session.checkpoint(label="first", idempotency_key="k-1")
    assert again.checkpoint_id == first.checkpoint_id and first.index is not None

    paused = session.pause(reason="lunch")
    assert paused.trigger == "pause"
    assert session.wait_for("paused", timeout=30).head is not None
    with pytest.raises(InvalidTransitionError) as refused:
        session.pause()
    assert refused.value.session_id == session_id and refused.value.code == "InvalidTransition"
    assert refused.value.status == 409 and refused.value.problem["type"].endswith("InvalidTransition")
    session.resume()
    session.wait_for("running", timeout=30)

    page = session.timeline(from_=1, limit=100)
    ids = [e.checkpoint.checkpoint_id for e in page.entries if e.kind == "checkpoint" and e.checkpoint]
    assert ids == [first.checkpoint_id, paused.checkpoint_id]
    entry = session.entry(first.index)
    assert entry.checkpoint is not None and entry.checkpoint.checkpoint_id == first.checkpoint_id

    rewound = session.rewind(to=first.index)
    assert rewound.restored_from.checkpoint_id == first.checkpoint_id and rewound.safety_checkpoint is not None
    forked = session.fork(first.index, paused=True)
    fork = client.get(forked.forks[0].session_id)
    assert fork.status().phase == "paused" and forked.from_.checkpoint_id == first.checkpoint_id
    configured = session.configure(policies={"checkpoint_every_ms": 600_000})
    assert configured.policies == {"checkpointEveryMs": 600_000}
    results = session.verify()
    assert results and all(v.status == "ok" for v in results)
    assert session_id in [s.session_id for s in client.list(phase="running")]
    deadline = time.monotonic() + 15  # visibility catches up with a start within moments
    while True:
        family = client.list_page(forked_from=session_id, limit=10)
        if family.sessions or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [s.session_id for s in family.sessions] == [fork.session_id] and family.next is None

    assert session.stop(checkpoint=False).phase == "completed"
    fork.stop()
    with pytest.raises(SessionClosedError):
        session.checkpoint()


async def test_the_async_client(aclient: AsyncClient, session_id: str) -> None:
    session = await aclient.start(session_id, {"kind": "memory"})
    ref = await session.checkpoint(idempotency_key="a-1")
    assert (await session.checkpoint(idempotency_key="a-1")).checkpoint_id == ref.checkpoint_id
    await session.pause()
    assert (await session.wait_for("paused", timeout=30)).phase == "paused"
    await session.resume()
    assert [e.index for e in (await session.timeline(limit=100)).entries][0] == 1
    with pytest.raises(SessionNotFoundError):
        await aclient.get(f"nobody-{session_id}").status()
    await session.stop()


def test_typed_errors(client: Client, session_id: str, gateway_url: str) -> None:
    with pytest.raises(InvalidInputError) as bad:
        client.start("..x", {"kind": "memory"})
    assert bad.value.status == 400 and bad.value.issues
    with pytest.raises(InvalidInputError) as unknown_field:
        client.start(session_id, {"kind": "memory", "initial_stat": "typo"})
    assert "initialStat" in str(unknown_field.value)
    with pytest.raises(SessionNotFoundError) as missing:
        client.get(f"nobody-{session_id}").status()
    assert missing.value.status == 404
    client.start(session_id, {"kind": "memory"})
    with pytest.raises(SessionAlreadyExistsError):
        client.start(session_id, {"kind": "memory"})
    client.get(session_id).stop()
    with Client(gateway_url, "dsk_wrong") as stranger, pytest.raises(UnauthorizedError):
        stranger.list()
    # Every code the domain has is a class of its own here.
    for code in json.loads(os.environ["SESSIONS_ERROR_CODES"]):
        assert ERROR_CLASSES[code] is not DurableSessionsError and ERROR_CLASSES[code].code == code


def test_events_stream_a_pause(client: Client, session_id: str) -> None:
    session = client.start(session_id, {"kind": "memory", "initial_state": "x" * 1000})
    seen: list[Event] = []

    def watch() -> None:
        for event in session.events():
            seen.append(event)
            if event.event == "phase" and event.data["phase"] == "paused":
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(0.5)
    paused = session.pause()
    watcher.join(timeout=30)
    assert not watcher.is_alive()
    phases = [e.data["phase"] for e in seen if e.event == "phase"]
    assert phases[0] == "running" and phases[-1] == "paused"
    entry = next(e for e in seen if e.event == "timeline" and e.data["kind"] == "checkpoint")
    assert entry.id == str(paused.index)
    session.stop(checkpoint=False)
    # An ended session's stream ends by itself.
    assert [e.data["phase"] for e in session.events() if e.event == "phase"] == ["completed"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _gateway(process: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, **json.loads(process["env"]), "DS_GATEWAY_PORT": str(port)}
    return subprocess.Popen(json.loads(process["command"]), cwd=process["cwd"], env=env)


def test_retries_across_a_gateway_restart(restartable: dict[str, str], api_key: str, session_id: str) -> None:
    port = _free_port()
    gateway = _gateway(restartable, port)
    try:
        with Client(f"http://127.0.0.1:{port}", api_key, retries=10) as client:
            # A read sent before the gateway listens: retried until it does.
            client.list(limit=1)
            session = client.start(session_id, {"kind": "memory"})
            gateway.terminate()
            gateway.wait(timeout=20)
            gateway = _gateway(restartable, port)
            # A keyed control across the restart: sent again until answered, once.
            ref = session.checkpoint(idempotency_key=f"r-{uuid.uuid4()}")
            head = session.status().head
            assert head is not None and head.checkpoint_id == ref.checkpoint_id
            session.stop()
        with Client(f"http://127.0.0.1:{_free_port()}", api_key, retries=1) as nobody, pytest.raises(UnavailableError):
            nobody.list()
    finally:
        gateway.terminate()
        gateway.wait(timeout=20)
