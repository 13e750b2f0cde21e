"""What the client sends, as pydantic models: runtime specs per kind, the start spec and each control's input.

Attributes are snake_case; ``wire()`` gives the gateway's camelCase JSON (``from_`` is ``from``). Every model refuses a
field it does not know, here, before anything is sent (the gateway's schemas are strict too). The caller's own data
(``env``, ``files``, message contents) is sent as given. The gateway checks every rule again (lengths, characters,
tool-call pairs): these models check types and names, and ids by the gateway's own rule.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from .errors import InvalidInputError

__all__ = [
    "AppendInput",
    "BranchInput",
    "CheckpointInput",
    "ConfigureInput",
    "ConversationRuntime",
    "ExportSessionInput",
    "ForkInput",
    "ForkOverrides",
    "InputModel",
    "Liveness",
    "MemoryRuntime",
    "Message",
    "PauseInput",
    "Placement",
    "RegenerateInput",
    "RemoteRuntime",
    "RetentionPolicy",
    "ResumeInput",
    "RewindInput",
    "RuntimeSpec",
    "SessionPolicies",
    "StartSessionInput",
    "StopInput",
    "ToolCall",
    "VerifyInput",
    "WorkspaceRuntime",
    "check_session_id",
]

#: The gateway's rule for session ids (SessionId in src/domain/schemas.ts): they become URL path segments, workflow
#: ids and directory names.
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_SESSION_ID = 128


def _id_problem(session_id: object) -> Optional[str]:
    if not isinstance(session_id, str):
        return "session id must be a string"
    if not 1 <= len(session_id) <= MAX_SESSION_ID:
        return f"session id must be 1 to {MAX_SESSION_ID} characters"
    if not SESSION_ID_PATTERN.fullmatch(session_id):
        return 'session id may only contain letters, digits, ".", "_" and "-", and must start with a letter or digit'
    if ".." in session_id:
        return 'session id must not contain ".."'
    return None


def check_session_id(session_id: str, field: str = "sessionId") -> str:
    """``session_id`` if the gateway would accept it; raises InvalidInputError (nothing sent) otherwise."""
    reason = _id_problem(session_id)
    if reason is not None:
        raise invalid_input(
            f"invalid input: {field}: {reason}", [{"code": "custom", "path": [field], "message": reason}]
        )
    return session_id


def invalid_input(detail: str, issues: list[dict[str, Any]]) -> InvalidInputError:
    """The InvalidInputError of an input refused here, shaped as the gateway's (status 400, zod-like ``issues``)."""
    code = "InvalidInput"
    problem = {
        "type": f"urn:durable-sessions:problem:{code}",
        "title": code,
        "status": 400,
        "detail": detail,
        "code": code,
        "issues": issues,
    }
    return InvalidInputError(detail, status=400, problem=problem)


def _wire_name(name: str) -> str:
    return "from" if name == "from_" else to_camel(name)


class InputModel(BaseModel):
    model_config = ConfigDict(alias_generator=_wire_name, populate_by_name=True, extra="forbid", frozen=True)

    def wire(self) -> dict[str, Any]:
        """The JSON the gateway takes: camelCase, fields left unset left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


In = TypeVar("In", bound=InputModel)


def build(model: type[In], **fields: Any) -> In:
    """``model`` from keyword fields (None: left out) whose values may be models or mappings (snake_case or camelCase
    keys); a refusal is an InvalidInputError naming the fields, raised before anything is sent."""
    try:
        return model.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as err:
        raise from_validation_error(err) from None


def from_validation_error(err: ValidationError) -> InvalidInputError:
    issues = [
        {"code": e["type"], "path": [p for p in e["loc"] if not isinstance(p, str) or p], "message": e["msg"]}
        for e in err.errors()
    ]
    detail = "; ".join(f"{'.'.join(str(p) for p in i['path']) or 'input'}: {i['message']}" for i in issues)
    return invalid_input(f"invalid input: {detail}", issues)


class WorkspaceRuntime(InputModel):
    """A working directory with a command running in it (a child process on one worker host)."""

    kind: Literal["workspace"] = "workspace"
    #: argv of the command, run with the workspace as its working directory.
    command: list[str]
    #: Extra environment variables for the command (names are shell identifiers, not DS_* or TEMPORAL_*).
    env: Optional[dict[str, str]] = None
    #: Seed files written before the first start: relative path → content (at most 256 KiB in total).
    files: Optional[dict[str, str]] = None
    #: How long ``stop`` waits after SIGTERM before SIGKILL (0–600000).
    stop_grace_ms: Optional[int] = None
    #: How long the command must stay alive before ``start`` answers (0–60000; default the worker's
    #: ``DS_START_SETTLE_MS``): one that exits within it fails the start with its exit code and last output.
    settle_ms: Optional[int] = None


class MemoryRuntime(InputModel):
    """A string held by the worker: fast, for tests and demos."""

    kind: Literal["memory"] = "memory"
    initial_state: Optional[str] = None


class ToolCall(InputModel):
    id: str
    name: str
    #: The arguments as the model wrote them (usually JSON text), kept as they are.
    arguments: str


class Message(InputModel):
    """One message of a conversation: ``tool_calls`` only on an assistant's, ``tool_call_id`` on a tool's."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: Optional[list[ToolCall]] = None
    tool_call_id: Optional[str] = None


class ConversationRuntime(InputModel):
    """An agent's conversation held by the worker: an append-only list of messages."""

    kind: Literal["conversation"] = "conversation"
    messages: Optional[list[Message]] = None


class RemoteRuntime(InputModel):
    """A command in a sandbox on a sandbox host (workers configured with ``DS_SANDBOX_HOSTS``): the fields of
    ``WorkspaceRuntime``. It outlives the worker that drives it: another worker takes it over."""

    kind: Literal["remote"] = "remote"
    command: list[str]
    env: Optional[dict[str, str]] = None
    files: Optional[dict[str, str]] = None
    stop_grace_ms: Optional[int] = None
    settle_ms: Optional[int] = None


#: A session's runtime, one model per kind (``kind`` tells them apart).
RuntimeSpec = Union[WorkspaceRuntime, MemoryRuntime, ConversationRuntime, RemoteRuntime]


class Liveness(InputModel):
    #: How long a host may go without a heartbeat before its runtime is declared lost (3000–3600000, default 30000).
    heartbeat_timeout_ms: Optional[int] = None
    #: A host must pick up work on its queue within this time (default 60000).
    host_timeout_ms: Optional[int] = None


class Placement(InputModel):
    """Where the session may run; without it, on the least-loaded live worker."""

    #: Only this worker: its worker id (DS_WORKER_ID) or host task queue.
    host: Optional[str] = None
    #: Only workers that carry every one of these labels (DS_WORKER_LABELS).
    worker_labels: Optional[list[str]] = None


class RetentionPolicy(InputModel):
    keep_last: Optional[int] = None
    max_age_ms: Optional[int] = None
    keep_labelled: Optional[bool] = None


class SessionPolicies(InputModel):
    """What the session does by itself on durable timers (durations in ms, at least 1000)."""

    checkpoint_every_ms: Optional[int] = None
    checkpoint_only_if_active: Optional[bool] = None
    checkpoint_before_stop: Optional[bool] = None
    idle_pause_after_ms: Optional[int] = None
    stop_paused_after_ms: Optional[int] = None


class StartSessionInput(InputModel):
    session_id: str
    tenant: Optional[str] = None
    runtime: Annotated[RuntimeSpec, Field(discriminator="kind")]
    liveness: Optional[Liveness] = None
    retention: Optional[RetentionPolicy] = None
    policies: Optional[SessionPolicies] = None
    background_verify: Optional[bool] = None
    description: Optional[str] = None
    labels: Optional[list[str]] = None
    placement: Optional[Placement] = None

    @field_validator("session_id")
    @classmethod
    def _session_id(cls, value: str) -> str:
        reason = _id_problem(value)
        if reason is not None:
            raise ValueError(reason)
        return value


class _Preconditions(InputModel):
    #: Apply only while this checkpoint is the session's head (else Conflict).
    if_head: Optional[str] = None
    #: Apply only while the head is the checkpoint at this timeline index (else Conflict).
    if_index: Optional[int] = None


class CheckpointInput(_Preconditions):
    label: Optional[str] = None
    idempotency_key: Optional[str] = None


class PauseInput(_Preconditions):
    reason: Optional[str] = None
    idempotency_key: Optional[str] = None


class ResumeInput(_Preconditions):
    checkpoint_id: Optional[str] = None
    idempotency_key: Optional[str] = None


class StopInput(_Preconditions):
    checkpoint: Optional[bool] = None
    reason: Optional[str] = None
    idempotency_key: Optional[str] = None


class VerifyInput(InputModel):
    checkpoint_id: Optional[str] = None


class RewindInput(_Preconditions):
    #: The checkpoint to go back to: its timeline index or its id.
    to: Optional[Union[int, str]] = None
    #: Conversation runtime: the state after this many messages.
    message_index: Optional[int] = None
    reason: Optional[str] = None
    idempotency_key: Optional[str] = None


class ForkOverrides(InputModel):
    """What a fork may set differently from its source."""

    description: Optional[str] = None
    labels: Optional[list[str]] = None
    retention: Optional[RetentionPolicy] = None
    policies: Optional[SessionPolicies] = None
    background_verify: Optional[bool] = None
    liveness: Optional[Liveness] = None


class BranchInput(_Preconditions):
    #: The new session's id (with ``count`` > 1, each fork is ``<new_session_id>-<n>``); generated when absent.
    new_session_id: Optional[str] = None
    count: Optional[int] = None
    overrides: Optional[ForkOverrides] = None
    #: Leave the forks paused at their first checkpoint.
    paused: Optional[bool] = None
    label: Optional[str] = None
    idempotency_key: Optional[str] = None

    @field_validator("new_session_id")
    @classmethod
    def _new_session_id(cls, value: Optional[str]) -> Optional[str]:
        reason = None if value is None else _id_problem(value)
        if reason is not None:
            raise ValueError(reason)
        return value


class ForkInput(BranchInput):
    #: The checkpoint the forks start from: its timeline index or id (default: the head).
    from_: Optional[Union[int, str]] = None
    #: Conversation runtime: fork from the state after this many messages.
    message_index: Optional[int] = None


class RegenerateInput(BranchInput):
    """Conversation runtime: a fork from just before the last assistant turn."""


class ConfigureInput(_Preconditions):
    #: Replaces the session's policies (an empty SessionPolicies turns every policy off).
    policies: Optional[SessionPolicies] = None
    retention: Optional[RetentionPolicy] = None
    idempotency_key: Optional[str] = None


class AppendInput(_Preconditions):
    """Conversation runtime: messages to append; ``checkpoint`` asks for a checkpoint after them (trigger ``turn``)."""

    messages: list[Message]
    checkpoint: Optional[bool] = None
    label: Optional[str] = None
    idempotency_key: Optional[str] = None


class ExportSessionInput(InputModel):
    """What an export takes: which checkpoint (default: the newest), and one of the two ways to seal it (the client
    checks there is exactly one before sending)."""

    checkpoint_id: Optional[str] = None
    #: Include the checkpoint's ancestors, oldest first.
    ancestors: Optional[bool] = None
    #: An X25519 public key (PEM, SPKI): only its private key opens the archive.
    recipient_public_key: Optional[str] = None
    passphrase: Optional[str] = None
