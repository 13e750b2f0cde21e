"""The gateway's JSON as pydantic models: snake_case attributes for the wire's camelCase fields.

Models allow fields this client does not know yet (a newer gateway may add some): they are kept, not refused.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = [
    "CheckpointRef",
    "Event",
    "Fallback",
    "ForkResult",
    "ForkedSession",
    "Problem",
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


class CheckpointRef(WireModel):
    checkpoint_id: str
    sequence: int
    created_at: str
    trigger: Optional[str] = None
    label: Optional[str] = None
    size: Optional[int] = None
    index: Optional[int] = None
    branch: Optional[int] = None
    parent_id: Optional[str] = None


class RuntimeInstance(WireModel):
    instance_id: str
    kind: str
    host_task_queue: Optional[str] = None
    location: Optional[str] = None


class SessionStatus(WireModel):
    session_id: str
    phase: str
    runtime_kind: str
    runtime: Optional[RuntimeInstance] = None
    head: Optional[CheckpointRef] = None
    checkpoint_count: int = 0
    pending_controls: int = 0
    failure: Optional[dict[str, Any]] = None
    started_at: str
    updated_at: str
    head_index: Optional[int] = None
    timeline_length: int = 0
    branch: int = 0
    runs: int = 1
    forked_from: Optional[dict[str, Any]] = None
    fork_count: int = 0


class SessionSummary(WireModel):
    session_id: str
    phase: Optional[str] = None
    runtime_kind: Optional[str] = None
    workflow_status: str
    started_at: str


class SessionPage(WireModel):
    sessions: list[SessionSummary]
    #: The ``cursor`` of the next page; None on the last.
    next: Optional[str] = None


class TimelineEntry(WireModel):
    """One timeline entry: ``kind`` says which (checkpoint, restored, rewound, forked, policy, …).

    ``checkpoint`` is set on checkpoints.
    """

    kind: str
    index: Optional[int] = None
    branch: Optional[int] = None
    at: str
    checkpoint: Optional[CheckpointRef] = None
    durability: Optional[str] = None


class TimelinePage(WireModel):
    entries: list[TimelineEntry]
    #: The ``from_`` of the next page; None at the end.
    next: Optional[int] = None


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
    phase: str
    #: The checkpoint taken before the runtime stopped; None when none was asked for or could be taken.
    final_checkpoint: Optional[CheckpointRef]


class VerificationResult(WireModel):
    """One checkpoint read back from the store: ``status`` is ok, missing, corrupt, tampered, incompatible or
    key-unavailable; ``detail`` says why when it is not ok."""

    checkpoint_id: str
    status: str
    detail: Optional[str] = None
    at: str


class VerificationResults(WireModel):
    """The answer to verify (the client returns its ``results``)."""

    results: list[VerificationResult]


class RewindResult(WireModel):
    restored_from: CheckpointRef
    safety_checkpoint: Optional[CheckpointRef] = None
    branch: int
    runtime: Optional[RuntimeInstance] = None


class ForkedSession(WireModel):
    session_id: str
    checkpoint: Optional[CheckpointRef] = None


class ForkResult(WireModel):
    from_: CheckpointRef
    forks: list[ForkedSession]

    model_config = ConfigDict(
        alias_generator=lambda n: "from" if n == "from_" else to_camel(n),
        populate_by_name=True,
        extra="allow",
        frozen=True,
    )


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
