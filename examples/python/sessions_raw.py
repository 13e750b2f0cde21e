"""Drive a durable-sessions session from Python with the raw Temporal SDK (no client of the project's).

    TEMPORAL_ADDRESS=127.0.0.1:7233 DS_TASK_QUEUE=durable-sessions DS_DATA_DIR=data python sessions_raw.py [SESSION_ID]

Starts a memory session, checkpoints, pauses, resumes, reads its status and timeline, shows the typed refusals a
caller meets, and stops it: one JSON object per step on stdout. The names and JSON shapes are the wire contract of
docs/design.md §4.3. Every input object is strict: keys are camelCase exactly as written there, and an unknown key is
refused with InvalidInput.

Payloads are encrypted as the workers encrypt them (payload_codec.py: the same AES-256-GCM envelope, with the
workers' payload keys: DS_PAYLOAD_KEY_DIR, DS_PAYLOAD_KEYS, or `<DS_DATA_DIR>/payload-keys` as `npm start` makes it).
Without a key it stops before it sends anything. Needs `temporalio` and `cryptography`; tested by
test/interop/python-sdk.test.ts against the encrypted default.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Iterator
from typing import Any

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from payload_codec import PayloadKeyError, codec_from_env, data_converter

Json = dict[str, Any]

WORKFLOW_TYPE = "sessionWorkflow"
DEFAULT_TASK_QUEUE = "durable-sessions"

# The failure types that cross the wire (src/domain/error-codes.ts); any other type is not a refusal of ours.
ERROR_CODES = frozenset(
    {
        "InvalidInput",
        "InvalidTransition",
        "SessionNotFound",
        "SessionAlreadyExists",
        "SessionClosed",
        "SnapshotNotFound",
        "SnapshotCorrupt",
        "SnapshotIncompatible",
        "SnapshotTampered",
        "KeyUnavailable",
        "RuntimeFailed",
        "RuntimeLost",
        "RestoreFailed",
        "StoreFull",
        "StoreUnavailable",
        "Conflict",
        "UnsafeMessageIndex",
        "Busy",
    }
)


class SessionError(Exception):
    """Raised when the session refuses or fails a call; `code` is one of ERROR_CODES."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def workflow_id(session_id: str) -> str:
    """One workflow per session, under an id derived from the session id (a session under another id fails)."""
    return f"session-{session_id}"


def session_error(err: BaseException) -> SessionError | None:
    """The project's error that a raw SDK error stands for, or None when it is none of ours (a network error)."""
    if isinstance(err, WorkflowAlreadyStartedError):
        # Session ids are never reused: neither a running nor an ended session's id starts another.
        return SessionError("SessionAlreadyExists", f"workflow {err.workflow_id} exists already")
    if isinstance(err, (WorkflowUpdateFailedError, WorkflowFailureError)):
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.type in ERROR_CODES:
            return SessionError(cause.type, cause.message)
    if isinstance(err, RPCError) and err.status == RPCStatusCode.NOT_FOUND:
        # The server answers NOT_FOUND both for an id never started and for an ended run; only its text differs.
        if "workflow execution already completed" in err.message:
            return SessionError("SessionClosed", "the session has ended: no control can change it")
        return SessionError("SessionNotFound", err.message)
    return None


@contextlib.contextmanager
def typed_errors() -> Iterator[None]:
    """Turns the SDK errors that carry a session's answer into SessionError; lets every other error through."""
    try:
        yield
    except (RPCError, WorkflowAlreadyStartedError, WorkflowUpdateFailedError, WorkflowFailureError) as err:
        typed = session_error(err)
        if typed is None:
            raise
        raise typed from err


async def start_session(client: Client, spec: Json, *, task_queue: str) -> Json:
    """Starts a session and returns its status once it runs: start and first answer are one call."""
    start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        WORKFLOW_TYPE,
        {"spec": spec},
        id=workflow_id(spec["sessionId"]),
        task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
    )
    with typed_errors():
        try:
            status: Json = await client.execute_update_with_start_workflow(
                "start", spec, start_workflow_operation=start
            )
            return status
        except WorkflowAlreadyStartedError:
            # The operation holds the same error: take it, or asyncio warns at exit that it was never retrieved.
            with contextlib.suppress(WorkflowAlreadyStartedError):
                await start.workflow_handle()
            raise
        except WorkflowUpdateFailedError as err:
            if session_error(err) is not None:
                raise
            # The run refused its spec at its first task, before the update had a handler: its failure says why.
            handle = await start.workflow_handle()
            await handle.result()
            raise


async def control(handle: WorkflowHandle[Any, Any], name: str, args: Json, *, key: str | None = None) -> Any:
    """Sends one control update and returns its result. A repeat of a key gets the first outcome again."""
    if key is not None:
        args = {**args, "idempotencyKey": key}
    # The server deduplicates by update id whatever the update's name, so the id names the control too.
    update_id = None if key is None else f"{name}:{key}"
    with typed_errors():
        return await handle.execute_update(name, args, id=update_id)


async def query(handle: WorkflowHandle[Any, Any], name: str) -> Any:
    """Reads `status` or `timeline`; both answer for an ended session too."""
    with typed_errors():
        return await handle.query(name)


def emit(step: str, **fields: Any) -> None:
    print(json.dumps({"step": step, **fields}), flush=True)


async def expect_refusal(case: str, attempt: Awaitable[object]) -> None:
    try:
        await attempt
    except SessionError as err:
        emit("refused", case=case, code=err.code, message=err.message)
    else:
        raise RuntimeError(f"{case}: expected the session to refuse, it accepted")


async def demo(client: Client, session_id: str, task_queue: str) -> None:
    spec: Json = {"sessionId": session_id, "runtime": {"kind": "memory", "initialState": "hello from Python"}}
    status = await start_session(client, spec, task_queue=task_queue)
    emit("started", sessionId=status["sessionId"], phase=status["phase"], runtimeKind=status["runtimeKind"])
    handle = client.get_workflow_handle(workflow_id(session_id))

    first = await control(handle, "checkpoint", {"label": "first"}, key=f"{session_id}-first")
    emit("checkpoint", checkpointId=first["checkpointId"], sequence=first["sequence"])
    # A retry after a lost answer: same key, same checkpoint, nothing captured twice.
    again = await control(handle, "checkpoint", {"label": "first"}, key=f"{session_id}-first")
    emit("checkpoint-repeated", checkpointId=again["checkpointId"], sequence=again["sequence"])

    paused = await control(handle, "pause", {"reason": "nightly"}, key=f"{session_id}-pause")
    status = await query(handle, "status")
    emit("paused", checkpointId=paused["checkpointId"], phase=status["phase"])
    resumed = await control(handle, "resume", {}, key=f"{session_id}-resume")
    status = await query(handle, "status")
    emit(
        "resumed",
        restoredFrom=resumed["restoredFrom"]["checkpointId"],
        phase=status["phase"],
        checkpointCount=status["checkpointCount"],
    )
    timeline = await query(handle, "timeline")
    emit("timeline", kinds=[entry["kind"] for entry in timeline], indices=[entry["index"] for entry in timeline])

    # Timeline indices are stable: pass one back to go there (a safety checkpoint comes first), or to fork from it.
    rewound = await control(handle, "rewind", {"to": first["index"]}, key=f"{session_id}-rewind")
    emit(
        "rewound",
        restoredFrom=rewound["restoredFrom"]["checkpointId"],
        branch=rewound["branch"],
        safetyTrigger=rewound["safetyCheckpoint"]["trigger"],
    )
    fork_input: Json = {"from": first["index"], "newSessionId": f"{session_id}-fork", "paused": True}
    forked = await control(handle, "fork", fork_input, key=f"{session_id}-fork")
    emit("forked", forks=[fork["sessionId"] for fork in forked["forks"]], fromCheckpoint=forked["from"]["checkpointId"])
    await expect_refusal("stale-head", control(handle, "checkpoint", {"ifHead": paused["checkpointId"]}))
    fork_handle = client.get_workflow_handle(workflow_id(f"{session_id}-fork"))
    await control(fork_handle, "stop", {}, key=f"{session_id}-fork-stop")

    await expect_refusal("snake-case-key", control(handle, "resume", {"checkpoint_id": paused["checkpointId"]}))
    await expect_refusal("resume-while-running", control(handle, "resume", {}))
    await expect_refusal("id-in-use", start_session(client, spec, task_queue=task_queue))
    bad_spec: Json = {"sessionId": f"{session_id}-bad", "runtime": {"kind": "memory", "initial_state": "x"}}
    await expect_refusal("bad-spec", start_session(client, bad_spec, task_queue=task_queue))
    unknown = client.get_workflow_handle(workflow_id(f"{session_id}-missing"))
    await expect_refusal("unknown-session", query(unknown, "status"))

    stopped = await control(handle, "stop", {"reason": "done"}, key=f"{session_id}-stop")
    final = stopped["finalCheckpoint"]
    emit("stopped", phase=stopped["phase"], finalCheckpointId=final and final["checkpointId"])
    await expect_refusal("after-stop", control(handle, "checkpoint", {}))


async def main(argv: list[str]) -> None:
    # The keys first: a deployment that encrypts must never receive a plaintext spec from us.
    codec = codec_from_env()
    address = os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233")
    client = await Client.connect(address, data_converter=data_converter(codec))
    session_id = argv[0] if argv else f"py-{uuid.uuid4().hex[:8]}"
    await demo(client, session_id, os.environ.get("DS_TASK_QUEUE", DEFAULT_TASK_QUEUE))


if __name__ == "__main__":
    exit_code = 0
    try:
        asyncio.run(main(sys.argv[1:]))
    except (SessionError, PayloadKeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        exit_code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The SDK's native threads can crash the interpreter's shutdown after a short client run (sdk-python #300).
    os._exit(exit_code)
