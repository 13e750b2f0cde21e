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
    "ForkResult",
    "ForkedSession",
    "RewindResult",
    "RuntimeInstance",
    "SessionStatus",
    "SessionPage",
    "SessionSummary",
    "TimelineEntry",
    "TimelinePage",
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
    """One Server-Sent Event: ``event`` is phase, progress or timeline; ``id`` is a timeline entry's index."""

    event: str
    id: Optional[str] = None
    data: Any = None
