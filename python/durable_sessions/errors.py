"""One exception class per error code of the gateway's problem documents (RFC 9457)."""

from __future__ import annotations

from typing import Any, Optional


class DurableSessionsError(Exception):
    """Base of every error the client raises for a problem document.

    ``code``, ``session_id``, ``status``, ``issues`` and the ``problem`` document itself.
    """

    code: str = "Error"
    #: Whether the same call may succeed if sent again (the client retries these itself).
    retryable: bool = False

    def __init__(self, message: str, *, status: int, problem: dict[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem
        self.code = str(problem.get("code", type(self).code))
        self.session_id: Optional[str] = problem.get("sessionId")
        self.issues: list[dict[str, Any]] = problem.get("issues") or []


class InvalidInputError(DurableSessionsError):
    """The input failed the schema; ``issues`` says where."""

    code = "InvalidInput"


class SessionFailedError(DurableSessionsError):
    """The session has failed: no control can change it. ``failure`` is what ended it (``type``, ``message``, ``at``,
    and for a command that died its exit code and last lines of output)."""

    code = "SessionFailed"

    @property
    def failure(self) -> dict[str, Any]:
        found = self.problem.get("failure") or self.problem.get("details") or {}
        return found if isinstance(found, dict) else {}


class IdempotencyKeyReusedError(DurableSessionsError):
    """The idempotency key was used before with another input: the first request's result is not this one's."""

    code = "IdempotencyKeyReused"


class InvalidTransitionError(DurableSessionsError):
    """Not legal in the session's phase."""

    code = "InvalidTransition"


class SessionNotFoundError(DurableSessionsError):
    """No session with that id."""

    code = "SessionNotFound"


class SessionAlreadyExistsError(DurableSessionsError):
    """The id is or was in use."""

    code = "SessionAlreadyExists"


class SessionClosedError(DurableSessionsError):
    """The session has ended."""

    code = "SessionClosed"


class SnapshotNotFoundError(DurableSessionsError):
    """The checkpoint is not in the store."""

    code = "SnapshotNotFound"


class SnapshotCorruptError(DurableSessionsError):
    """The checkpoint's bytes are damaged."""

    code = "SnapshotCorrupt"


class SnapshotIncompatibleError(DurableSessionsError):
    """The checkpoint was written by a version that cannot restore."""

    code = "SnapshotIncompatible"


class SnapshotTamperedError(DurableSessionsError):
    """The checkpoint failed authentication."""

    code = "SnapshotTampered"


class KeyUnavailableError(DurableSessionsError):
    """A key to read the checkpoint is missing."""

    code = "KeyUnavailable"


class RuntimeFailedError(DurableSessionsError):
    """The runtime could not start, capture or stop."""

    code = "RuntimeFailed"


class RuntimeLostError(DurableSessionsError):
    """The runtime instance is gone."""

    code = "RuntimeLost"


class RestoreFailedError(DurableSessionsError):
    """No checkpoint of the session could be restored."""

    code = "RestoreFailed"


class NoEligibleHostError(DurableSessionsError):
    """No live worker host satisfies the session's placement."""

    code = "NoEligibleHost"


class StoreFullError(DurableSessionsError):
    """The snapshot store has no room or is read-only."""

    code = "StoreFull"


class StoreUnavailableError(DurableSessionsError):
    """The snapshot store did not answer within the worker's retry bound; a later attempt may succeed."""

    code = "StoreUnavailable"
    retryable = True


class ConflictError(DurableSessionsError):
    """A stale ifHead/ifIndex, or a conflicting control."""

    code = "Conflict"


class SessionBusyError(DurableSessionsError):
    """The session is handing over; sent again by the client."""

    code = "Busy"
    retryable = True


class UnsafeMessageIndexError(DurableSessionsError):
    """The index splits a tool call from its result."""

    code = "UnsafeMessageIndex"


class WorkerUnavailableError(DurableSessionsError):
    """No worker answered for the session within the gateway's bound: none polls its task queue, or none that does
    answers. ``last_known`` is what Temporal itself knows (``workflowStatus``, ``phase``, ``host``,
    ``checkpointCount``, ``headCheckpointId``, ``failureCode``, ``taskQueue``, ``lastPollAt``, …). Not sent again by
    the client: the gateway has waited already; ask again once a worker runs."""

    code = "WorkerUnavailable"

    @property
    def last_known(self) -> dict[str, Any]:
        found = self.problem.get("lastKnown") or {}
        return found if isinstance(found, dict) else {}


class UnauthorizedError(DurableSessionsError):
    """No valid API key."""

    code = "Unauthorized"


class ForbiddenError(DurableSessionsError):
    """The key's role may not do this."""

    code = "Forbidden"


class NotFoundError(DurableSessionsError):
    """No such route or timeline entry."""

    code = "NotFound"


class PayloadTooLargeError(DurableSessionsError):
    """The request body is over the limit."""

    code = "PayloadTooLarge"


class UnsupportedMediaTypeError(DurableSessionsError):
    """The request body is not JSON in UTF-8 (``Content-Type``); this client always sends that."""

    code = "UnsupportedMediaType"


class RateLimitedError(DurableSessionsError):
    """Over the key's request rate; sent again after ``Retry-After`` by the client."""

    code = "RateLimited"
    retryable = True


class UnavailableError(DurableSessionsError):
    """Temporal (or the gateway) cannot be reached."""

    code = "Unavailable"
    retryable = True


class NotConfiguredError(DurableSessionsError):
    """The gateway is not set up for this call (export and import need DS_GATEWAY_ARCHIVES=on there)."""

    code = "NotConfigured"


class InternalError(DurableSessionsError):
    """The gateway failed; its log has the details."""

    code = "Internal"


#: Every error class by its code.
ERROR_CLASSES: dict[str, type[DurableSessionsError]] = {cls.code: cls for cls in DurableSessionsError.__subclasses__()}


def error_from_problem(status: int, problem: dict[str, Any]) -> DurableSessionsError:
    """The typed exception for a problem document (the base class for a code this client does not know)."""
    cls = ERROR_CLASSES.get(str(problem.get("code")), DurableSessionsError)
    return cls(str(problem.get("detail") or problem.get("title") or f"HTTP {status}"), status=status, problem=problem)


# Spelled out, not derived from ERROR_CLASSES: type checkers read __all__ statically (a test keeps the two equal).
__all__ = [
    "DurableSessionsError",
    "ERROR_CLASSES",
    "error_from_problem",
    "InvalidInputError",
    "SessionFailedError",
    "IdempotencyKeyReusedError",
    "InvalidTransitionError",
    "SessionNotFoundError",
    "SessionAlreadyExistsError",
    "SessionClosedError",
    "SnapshotNotFoundError",
    "SnapshotCorruptError",
    "SnapshotIncompatibleError",
    "SnapshotTamperedError",
    "KeyUnavailableError",
    "RuntimeFailedError",
    "RuntimeLostError",
    "RestoreFailedError",
    "NoEligibleHostError",
    "StoreFullError",
    "StoreUnavailableError",
    "ConflictError",
    "SessionBusyError",
    "UnsafeMessageIndexError",
    "WorkerUnavailableError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "RateLimitedError",
    "UnavailableError",
    "NotConfiguredError",
    "InternalError",
]
