"""The gateway's JSON as pydantic models: snake_case attributes for the wire's camelCase fields.

Models allow fields this client does not know yet (a newer gateway may add some): they are kept, not refused.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = [
    "AppendResult",
    "BranchTip",
    "CheckpointRef",
    "Event",
    "Fallback",
    "ForkOrigin",
    "ForkRecord",
    "ForkResult",
    "ForkedSession",
    "ImportResult",
    "ImportedCheckpoint",
    "ImportedFrom",
    "LastRestore",
    "Problem",
    "RejectedSignal",
    "ResumeResult",
    "RewindResult",
    "RuntimeInstance",
    "StopResult",
    "SessionStatus",
    "SessionPage",
    "SessionSummary",
    "TimelineEntry",
    "TimelinePage",
    "VerificationResult",
    "VerificationResults",
    "WireModel",
]


class WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)


def _wire_name(name: str) -> str:
    """camelCase, and ``from`` for ``from_`` (a Python keyword)."""
    return "from" if name == "from_" else to_camel(name)


class CheckpointRef(WireModel):
    checkpoint_id: str
    session_id: str
    sequence: int
    #: The checkpoint this one's state descends from; None for a session's first.
    parent_id: Optional[str]
    #: Why it was taken: manual, pause, stop, drain, automatic, rewind-safety, turn, fork (more may come).
    trigger: str
    label: Optional[str] = None
    runtime_kind: str
    runtime_version: str
    format_version: int
    size: int
    #: ``sha256:`` and the hex digest of its manifest.
    digest: str
    created_at: str
    #: Protection at rest (aes-256-gcm, or none when configured so).
    encryption: Optional[str] = None
    #: Its timeline index (pass it back as ``to`` or ``from_``); None on checkpoints from before indices.
    index: Optional[int] = None
    branch: Optional[int] = None
    #: Conversation runtime: the messages it holds.
    message_count: Optional[int] = None


class RuntimeInstance(WireModel):
    instance_id: str
    kind: str
    host_task_queue: str
    location: str
    #: Where the runtime's output goes (a workspace command's log file), when it has one.
    output: Optional[str] = None
    pid: Optional[int] = None
    started_at: str
    #: The session's generation when its worker took the instance (a ``remote`` sandbox's fencing token).
    fence: Optional[int] = None


class VerificationResult(WireModel):
    """One checkpoint read back from the store: ``status`` is ok, missing, corrupt, tampered, incompatible or
    key-unavailable; ``detail`` says why when it is not ok."""

    checkpoint_id: str
    status: str
    detail: Optional[str] = None
    at: str


class RejectedSignal(WireModel):
    """A fire-and-forget control that could not be applied, and why."""

    signal: str
    reason: str
    at: str


class PhaseChange(WireModel):
    """One phase a session's run went through: ``n`` counts the changes from the run's start."""

    n: int
    phase: str
    at: str


class LastRestore(WireModel):
    """The session's last restore: the checkpoint it restored, and those it fell back from."""

    checkpoint_id: str
    at: str
    fallback_from: list[str]


class BranchTip(WireModel):
    """A branch's newest checkpoint (None before its first)."""

    branch: int
    checkpoint_id: Optional[str]


class ForkRecord(WireModel):
    """A session forked from this one, and the checkpoint it started from."""

    session_id: str
    checkpoint_id: str
    at: str


class ForkOrigin(WireModel):
    """Where a session was forked from: the source session and checkpoint (and its index there)."""

    session_id: str
    checkpoint_id: str
    index: Optional[int] = None


class SessionStatus(WireModel):
    session_id: str
    #: Set for a session of another tenant than ``default``.
    tenant: Optional[str] = None
    phase: str
    runtime_kind: str
    runtime: Optional[RuntimeInstance]
    head: Optional[CheckpointRef]
    checkpoint_count: int
    #: Controls accepted and not yet finished.
    pending_controls: int
    #: ``type`` (an error code), ``message`` and ``at`` of what ended or stopped the session.
    failure: Optional[dict[str, Any]]
    last_restore: Optional[LastRestore]
    last_verification: Optional[VerificationResult]
    last_rejected_signal: Optional[RejectedSignal]
    #: The newest refused signals (at most ten), oldest first.
    rejected_signals: list[RejectedSignal]
    started_at: str
    updated_at: str
    head_index: Optional[int]
    timeline_length: int
    branch: int
    #: The newest branches' tips.
    tips: list[BranchTip]
    runs: int
    #: The session's policies, as ``configure`` takes them (camelCase keys).
    policies: dict[str, Any]
    retention: Optional[dict[str, Any]]
    #: Where this session was forked from.
    forked_from: Optional[ForkOrigin]
    #: The newest forks made from this session (``fork_count`` counts them all).
    forks: list[ForkRecord]
    fork_count: int
    last_activity_at: str
    #: The phases this run went through, newest last (at most 16): ``events()`` streams every one of them.
    recent_phases: Optional[list[PhaseChange]] = None
    #: Conversation runtime: the messages the session holds.
    message_count: Optional[int] = None


class SessionSummary(WireModel):
    session_id: str
    phase: Optional[str] = None
    runtime_kind: Optional[str] = None
    workflow_status: str
    started_at: str


class SessionPage(WireModel):
    sessions: list[SessionSummary]
    #: The ``cursor`` of the next page; None on the last.
    next: Optional[str]


class TimelineEntry(WireModel):
    """One timeline entry: ``kind`` says which (checkpoint, restored, rewound, forked, policy, …), and which of the
    other fields it has: every kind has ``at`` (and ``index`` and ``branch`` since indices exist).

    ``checkpoint`` is set on checkpoints.
    """

    kind: str
    index: Optional[int] = None
    branch: Optional[int] = None
    at: str
    # checkpoint
    checkpoint: Optional[CheckpointRef] = None
    durability: Optional[str] = None
    message_index: Optional[int] = None
    regenerated: Optional[bool] = None
    #: Why (a pause's or stop's reason, a failure's, a policy's, …).
    reason: Optional[str] = None
    # restored, restarted-from-spec, restore-failed, runtime-lost, checkpoint-deleted, forked, verified
    checkpoint_id: Optional[str] = None
    instance_id: Optional[str] = None
    #: What started a restore (resume, recovery, drain, rewind, fork) or a verification (background, request).
    cause: Optional[str] = None
    #: ``taken-over``: the worker that took the sandbox over, and the session's generation from then on.
    host: Optional[str] = None
    generation: Optional[int] = None
    # fallback
    from_checkpoint_id: Optional[str] = None
    to_checkpoint_id: Optional[str] = None
    # control-failed
    control: Optional[str] = None
    type: Optional[str] = None
    # runtime-exited, signal-rejected
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    # verified
    status: Optional[str] = None
    detail: Optional[str] = None
    # rewound
    to: Optional[str] = None
    to_index: Optional[int] = None
    from_branch: Optional[int] = None
    from_head: Optional[str] = None
    safety_checkpoint_id: Optional[str] = None
    # forked, forked-from
    checkpoint_index: Optional[int] = None
    #: ``sessionId`` and ``checkpointId`` of each fork made.
    forks: Optional[list[dict[str, Any]]] = None
    regenerate: Optional[bool] = None
    replaces: Optional[str] = None
    from_: Optional[ForkOrigin] = None
    # configured
    policies: Optional[dict[str, Any]] = None
    retention: Optional[dict[str, Any]] = None
    # policy
    action: Optional[str] = None
    # appended
    first_index: Optional[int] = None
    count: Optional[int] = None

    model_config = ConfigDict(alias_generator=_wire_name, populate_by_name=True, extra="allow", frozen=True)


class TimelinePage(WireModel):
    entries: list[TimelineEntry]
    #: The ``from_`` of the next page; None at the end.
    next: Optional[int]


class Fallback(WireModel):
    """A checkpoint a resume could not restore, and why (an older one was restored instead)."""

    checkpoint_id: str
    reason: str


class ResumeResult(WireModel):
    restored_from: CheckpointRef
    #: Set when the checkpoint asked for could not be restored and an older one was.
    fallback_from: Optional[list[Fallback]] = None
    runtime: RuntimeInstance


class StopResult(WireModel):
    phase: Literal["completed"]
    #: The checkpoint taken before the runtime stopped; None when none was asked for or could be taken.
    final_checkpoint: Optional[CheckpointRef]


class VerificationResults(WireModel):
    """The answer to verify (the client returns its ``results``)."""

    results: list[VerificationResult]


class RewindResult(WireModel):
    restored_from: CheckpointRef
    #: The checkpoint taken of a running session before it went back; None for a paused one.
    safety_checkpoint: Optional[CheckpointRef]
    branch: int
    #: The new runtime instance; None for a paused session (it restores on resume).
    runtime: Optional[RuntimeInstance]


class ForkedSession(WireModel):
    session_id: str
    checkpoint: CheckpointRef


class ForkResult(WireModel):
    from_: CheckpointRef
    forks: list[ForkedSession]

    model_config = ConfigDict(alias_generator=_wire_name, populate_by_name=True, extra="allow", frozen=True)


class AppendResult(WireModel):
    """What an append answers (conversation runtime)."""

    #: Messages the conversation holds now.
    message_count: int
    #: The index the first appended message got.
    first_index: int
    #: The checkpoint taken after the append (trigger ``turn``), when one was asked for.
    checkpoint: Optional[CheckpointRef]


class ImportedFrom(WireModel):
    #: The exported session (in the deployment the archive came from) and its checkpoint the new session starts from.
    session_id: str
    checkpoint_id: str


class ImportedCheckpoint(WireModel):
    checkpoint_id: str
    size: int


class ImportResult(WireModel):
    """What an import answers: the new session's id, where it came from, its checkpoints (oldest first)."""

    session_id: str
    imported_from: ImportedFrom
    checkpoints: list[ImportedCheckpoint]


class Event(BaseModel):
    """One Server-Sent Event: ``event`` is phase, progress or timeline; ``id`` is a timeline entry's index.

    ``data`` is the event's JSON, parsed (None when the stream sent it empty).
    """

    event: str
    id: Optional[str] = None
    data: Any


class Problem(WireModel):
    """An RFC 9457 problem document, the body of every error answer: ``code`` picks the class in errors.py."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    session_id: Optional[str] = None
    #: zod's issues (``code``, ``path``, ``message``) for InvalidInput.
    issues: Optional[list[dict[str, Any]]] = None
    #: What ended the session (``type``, ``message``, ``exit_code``, ``output_tail``, …) for SessionFailed, and for a
    #: RuntimeFailed start whose command exited within its settle window.
    failure: Optional[dict[str, Any]] = None
    #: What Temporal knows of a session no worker answers for (``workflowStatus``, ``phase``, ``host``, …), for
    #: WorkerUnavailable.
    last_known: Optional[dict[str, Any]] = None

    @classmethod
    def make(cls, status: int, code: str, detail: str, session_id: Optional[str] = None) -> Problem:
        """A problem document of the client's own (the gateway could not be reached, or sent none), shaped as the
        gateway's are."""
        return cls(
            type=f"urn:durable-sessions:problem:{code}",
            title=code,
            status=status,
            detail=detail,
            code=code,
            session_id=session_id,
        )

    def wire(self) -> dict[str, Any]:
        """The document as the gateway sends it: camelCase, absent fields left out, unknown ones kept."""
        return self.model_dump(by_alias=True, exclude_none=True)
