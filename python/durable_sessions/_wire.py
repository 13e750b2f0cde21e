"""What the sync and async clients share: requests as data, snake_case to camelCase, retries, SSE parsing."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import httpx
from pydantic import ValidationError

from .errors import DurableSessionsError, UnavailableError, error_from_problem
from .models import Event, Problem

#: Sub-objects whose keys are schema fields (converted); everything else under them is left as given.
_SCHEMA_OBJECTS = {"policies", "retention", "liveness", "overrides"}
#: Keys whose values are the caller's own data: their keys are never converted.
_USER_DATA = {"env", "files", "messages", "initialState"}


def camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_wire(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Drops None, converts snake_case keys (and those of schema sub-objects) to camelCase; user data untouched."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        wire = camel(key)
        if wire in _SCHEMA_OBJECTS and isinstance(value, Mapping):
            value = to_wire(value)
        elif wire == "runtime" and isinstance(value, Mapping):
            value = {camel(k): v for k, v in value.items() if v is not None}
        out[wire] = value
    return out


@dataclass
class Request:
    method: str
    path: str
    json: Optional[dict[str, Any]] = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: Safe to send again: reads, and controls carrying an idempotency key.
    retryable: bool = True


def control(session_id: str, name: str, fields: Mapping[str, Any], keyed: bool = True) -> Request:
    """A control, with an idempotency key (the caller's, or a new one) so that a retry is answered once."""
    body = to_wire(fields)
    headers: dict[str, str] = {}
    if keyed:
        headers["idempotency-key"] = str(body.pop("idempotencyKey", None) or uuid.uuid4())
    return Request("POST", f"/v1/sessions/{session_id}/{name}", json=body, headers=headers)


def read(path: str, **params: Any) -> Request:
    return Request("GET", path, params={camel(k): _param(v) for k, v in params.items() if v is not None})


def _param(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


def problem_error(status: int, text: str) -> DurableSessionsError:
    """The typed error of an error answer: its problem document, or one of the client's own when the body is none
    (a proxy's page, an empty body)."""
    try:
        problem = Problem.model_validate_json(text)
    except ValidationError:
        problem = Problem.make(status, "Unavailable" if status in (502, 503, 504) else "Internal", f"HTTP {status}")
    return error_from_problem(status, problem.wire())


def backoff(attempt: int, retry_after: Optional[str]) -> float:
    """Seconds to wait before attempt ``attempt + 1``: the server's Retry-After, else 0.2 s doubling, at most 5 s."""
    if retry_after and re.fullmatch(r"\d+(\.\d+)?", retry_after):
        return min(float(retry_after), 30.0)
    return min(0.2 * 2.0**attempt, 5.0)


def settle(
    req: Request, attempt: int, retries: int, res: Optional[httpx.Response] = None, err: Optional[Exception] = None
) -> tuple[bool, Any]:
    """One attempt's outcome: ``(True, body)`` when answered, ``(False, seconds)`` to send again after a pause; raises
    what the caller must see. Only a refused connection is retried (the request never arrived), and only a request
    that is safe to send twice."""
    last = attempt >= retries
    if err is not None:
        if not req.retryable or last or not isinstance(err, httpx.ConnectError):
            detail = f"the gateway cannot be reached: {err}"
            raise UnavailableError(detail, status=503, problem=Problem.make(503, "Unavailable", detail).wire()) from err
        return False, backoff(attempt, None)
    assert res is not None
    if res.is_success:
        return True, (res.json() if res.content else None)
    error = problem_error(res.status_code, res.text)
    if last or not req.retryable or not error.retryable:
        raise error
    return False, backoff(attempt, res.headers.get("retry-after"))


class SseParser:
    """Server-Sent Events from lines (text/event-stream): one Event per blank-line-terminated block with an event."""

    def __init__(self) -> None:
        self._fields: dict[str, list[str]] = {}

    def feed(self, lines: Iterable[str]) -> Iterator[Event]:
        for line in lines:
            event = self.line(line)
            if event is not None:
                yield event

    def line(self, line: str) -> Optional[Event]:
        line = line.rstrip("\r\n")
        if line == "":
            fields, self._fields = self._fields, {}
            if "event" not in fields:
                return None
            data = "\n".join(fields.get("data", []))
            return Event(
                event=fields["event"][-1],
                id=fields["id"][-1] if "id" in fields else None,
                data=json.loads(data) if data else None,
            )
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        self._fields.setdefault(name, []).append(value[1:] if value.startswith(" ") else value)
        return None
