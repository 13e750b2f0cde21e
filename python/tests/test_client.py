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
    ConversationRuntime,
    DurableSessionsError,
    Event,
    InvalidInputError,
    InvalidTransitionError,
    MemoryRuntime,
    Message,
    SessionAlreadyExistsError,
    SessionClosedError,
    SessionNotFoundError,
    SessionPolicies,
    SnapshotNotFoundError,
    UnauthorizedError,
    UnavailableError,
    WorkspaceRuntime,
)


def test_the_whole_flow(client: Client, session_id: str) -> None:
    # snake_case in Python, camelCase on the wire: initial_state is the runtime's initialState.
    session = client.start(session_id, MemoryRuntime(initial_state="v1"), description="from Python")
    started = session.last_status
    assert started is not None and started.phase == "running" and started.session_id == session_id
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

    page = session.timeline_page(from_=1, limit=100)
    ids = [e.checkpoint.checkpoint_id for e in page.entries if e.kind == "checkpoint" and e.checkpoint]
    assert ids == [first.checkpoint_id, paused.checkpoint_id]
    entry = session.entry(first.index)
    assert entry.checkpoint is not None and entry.checkpoint.checkpoint_id == first.checkpoint_id

    rewound = session.rewind(to=first.index)
    assert rewound.restored_from.checkpoint_id == first.checkpoint_id and rewound.safety_checkpoint is not None
    forks = session.fork(first.index, paused=True)
    [fork] = forks
    assert fork.status().phase == "paused" and forks.from_.checkpoint_id == first.checkpoint_id
    configured = session.configure(policies=SessionPolicies(checkpoint_every_ms=600_000))
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
    assert session.last_status is not None and session.last_status.phase == "running"
    ref = await session.checkpoint(idempotency_key="a-1")
    assert (await session.checkpoint(idempotency_key="a-1")).checkpoint_id == ref.checkpoint_id
    await session.pause()
    assert (await session.wait_for("paused", timeout=30)).phase == "paused"
    await session.resume()
    assert [e.index async for e in session.timeline(page_size=1)][:2] == [1, 2]
    [fork] = await session.fork(1, paused=True)
    assert (await fork.status()).phase == "paused"
    await fork.stop()
    with pytest.raises(SessionNotFoundError):
        await aclient.get(f"nobody-{session_id}").status()
    await session.stop()
    # The whole timeline, then the phase the session ended in; the stream ends by itself.
    length = (await session.status()).timeline_length
    events = [e async for e in session.events(last_event_id="0")]
    assert [int(e.id) for e in events if e.event == "timeline" and e.id] == list(range(1, length + 1))
    assert [e.data["phase"] for e in events if e.event == "phase"] == ["completed"]


def test_typed_errors(client: Client, session_id: str, gateway_url: str) -> None:
    with pytest.raises(InvalidInputError) as bad:
        client.start("..x", {"kind": "memory"})
    assert bad.value.status == 400 and bad.value.issues
    # Refused here, before anything is sent: the models are as strict as the gateway's schemas.
    with pytest.raises(InvalidInputError) as unknown_field:
        client.start(session_id, {"kind": "memory", "initial_stat": "typo"})
    assert "initial_stat" in str(unknown_field.value) and unknown_field.value.issues
    with pytest.raises(SessionNotFoundError) as missing:
        client.get(f"nobody-{session_id}").status()
    assert missing.value.status == 404
    client.start(session_id, {"kind": "memory"})
    with pytest.raises(SessionAlreadyExistsError):
        client.start(session_id, {"kind": "memory"})
    client.get(session_id).stop()
    with Client(gateway_url, "dsk_wrong") as stranger, pytest.raises(UnauthorizedError):
        next(stranger.list())
    # Every code the domain has is a class of its own here.
    for code in json.loads(os.environ["SESSIONS_ERROR_CODES"]):
        assert ERROR_CLASSES[code] is not DurableSessionsError and ERROR_CLASSES[code].code == code


def test_an_ended_session_is_verified_through_a_worker(client: Client, session_id: str) -> None:
    # No workflow is left to ask: a worker reads what the session left in the store.
    session = client.start(session_id, MemoryRuntime(initial_state="v1"))
    first = session.checkpoint(label="first")
    final = session.stop().final_checkpoint
    assert final is not None
    results = session.verify()
    assert [(v.checkpoint_id, v.status) for v in results] == [(first.checkpoint_id, "ok"), (final.checkpoint_id, "ok")]
    assert [v.checkpoint_id for v in session.verify(checkpoint_id=first.checkpoint_id)] == [first.checkpoint_id]
    # The refusal a running session gives a checkpoint it does not have.
    with pytest.raises(SnapshotNotFoundError) as unknown:
        session.verify(checkpoint_id="000099-0badc0de")
    assert unknown.value.status == 404 and unknown.value.session_id == session_id


def test_events_stream_a_pause(client: Client, session_id: str) -> None:
    session = client.start(session_id, MemoryRuntime(initial_state="x" * 1000))
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
            client.list_page(limit=1)
            session = client.start(session_id, MemoryRuntime())
            gateway.terminate()
            gateway.wait(timeout=20)
            gateway = _gateway(restartable, port)
            # A keyed control across the restart: sent again until answered, once.
            ref = session.checkpoint(idempotency_key=f"r-{uuid.uuid4()}")
            head = session.status().head
            assert head is not None and head.checkpoint_id == ref.checkpoint_id
            session.stop()
        with Client(f"http://127.0.0.1:{_free_port()}", api_key, retries=1) as nobody, pytest.raises(UnavailableError):
            nobody.list_page()
    finally:
        gateway.terminate()
        gateway.wait(timeout=20)


def test_an_id_is_checked_by_the_gateways_rule_and_never_names_another_path(client: Client, session_id: str) -> None:
    other = client.start(session_id, MemoryRuntime())
    for bad in (f"x/../{session_id}", f"..{session_id}", f"{session_id}/checkpoint", "", "a" * 129, "x?y=1", "%2e%2e"):
        with pytest.raises(InvalidInputError) as refused:
            client.get(bad).checkpoint()
        assert refused.value.status == 400 and refused.value.issues[0]["path"] == ["sessionId"]
    # Nothing reached the session the path pointed at.
    assert other.status().checkpoint_count == 0
    other.stop(checkpoint=False)


def test_list_and_timeline_iterate_every_page(client: Client, session_id: str) -> None:
    label = f"py-pages-{uuid.uuid4().hex[:8]}"
    sessions = [client.start(f"{session_id}-{i}", MemoryRuntime(), labels=[label]) for i in range(3)]
    deadline = time.monotonic() + 15  # visibility catches up with a start within moments
    while len(client.list_page(label=label, limit=10).sessions) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    listed = [s.session_id for s in client.list(label=label, page_size=1)]
    assert sorted(listed) == sorted(s.session_id for s in sessions)

    session = sessions[0]
    refs = [session.checkpoint(label=f"c{i}") for i in range(5)]
    entries = list(session.timeline(page_size=2))
    assert [e.index for e in entries] == list(range(1, 6))
    assert [e.checkpoint.checkpoint_id for e in entries if e.checkpoint] == [r.checkpoint_id for r in refs]
    assert [e.index for e in session.timeline(from_=4)] == [4, 5]
    for s in sessions:
        s.stop(checkpoint=False)


def test_append_and_regenerate_a_conversation(client: Client, session_id: str) -> None:
    session = client.start(session_id, ConversationRuntime(messages=[Message(role="system", content="be brief")]))
    asked = session.append([Message(role="user", content="hi")], checkpoint=True, label="asked")
    assert (asked.first_index, asked.message_count) == (1, 2)
    assert asked.checkpoint is not None and asked.checkpoint.trigger == "turn" and asked.checkpoint.message_count == 2
    # A mapping is a message too (snake_case or camelCase keys).
    answered = session.append([{"role": "assistant", "content": "hello"}], checkpoint=True)
    assert answered.message_count == 3 and answered.checkpoint is not None
    assert session.append([Message(role="user", content="more")]).checkpoint is None

    forks = session.regenerate(paused=True, new_session_id=f"{session_id}-again")
    [again] = forks
    assert again.session_id == f"{session_id}-again"
    assert forks.from_.checkpoint_id == asked.checkpoint.checkpoint_id and again.status().message_count == 2
    with pytest.raises(InvalidInputError):
        session.append([])
    again.stop()
    session.stop(checkpoint=False)


def test_a_call_the_gateway_does_not_answer_ends_at_its_timeout(api_key: str) -> None:
    # A gateway that accepts connections and never answers (hung, or a proxy in front of one).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with Client(url, api_key, timeout=600, retries=1) as client:
            with pytest.raises(UnavailableError) as late:
                client.get("s-1").status(timeout=0.5)
            assert "within 0.5 s" in str(late.value)
            with pytest.raises(UnavailableError):
                list(client.get("s-1").events(last_event_id="0", read_timeout=0.5))


def test_a_session_that_failed_is_reported_failed_with_its_failure(client: Client, session_id: str) -> None:
    with pytest.raises(DurableSessionsError) as failed:
        session = client.start(session_id, WorkspaceRuntime(command=["sh", "-c", "exit 3"]))
        session.wait_for("paused", timeout=60)
    assert failed.value.code != "SessionNotFound" and failed.value.session_id == session_id
    assert client.get(session_id).status().phase == "failed"


def test_events_reconnect_with_last_event_id_and_miss_no_entry(
    restartable: dict[str, str], client: Client, api_key: str, session_id: str
) -> None:
    port = _free_port()
    gateway = _gateway(restartable, port)
    try:
        with Client(f"http://127.0.0.1:{port}", api_key, retries=30) as own:
            own.list_page(limit=1)  # sent again until the gateway listens
            session = client.start(session_id, MemoryRuntime())
            stream = own.get(session_id).events(read_timeout=10)
            assert next(stream).event == "phase"
            first = session.checkpoint(label="before")
            seen = next(e for e in stream if e.event == "timeline")
            assert seen.id == str(first.index)
            # The stream's gateway dies; a checkpoint is taken through another while it is down.
            gateway.kill()
            gateway.wait(timeout=20)
            missed = session.checkpoint(label="while-down")
            gateway = _gateway(restartable, port)
            session.stop(checkpoint=False)
            rest = list(stream)
        indices = [int(e.id) for e in rest if e.event == "timeline" and e.id is not None]
        assert missed.index in indices and indices == sorted(set(indices))
        assert [e.data["phase"] for e in rest if e.event == "phase"][-1] == "completed"
    finally:
        gateway.kill()
        gateway.wait(timeout=20)
