"""What the sync and async clients share: requests as data, snake_case to camelCase, retries, SSE parsing."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from .errors import DurableSessionsError, UnavailableError, error_from_problem
from .inputs import InputModel, check_session_id
from .models import Event, Problem


def camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass
class Request:
    method: str
    path: str
    json: Optional[dict[str, Any]] = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: Safe to send again: reads, and controls carrying an idempotency key.
    retryable: bool = True
    #: Seconds the whole call may take, retries included; None: the client's.
    timeout: Optional[float] = None


def session_path(session_id: str, *rest: str) -> str:
    """``/v1/sessions/<id>/…``: the id checked by the gateway's rule first (InvalidInputError, nothing sent), and every
    segment quoted, so that no id can name another path."""
    check_session_id(session_id)
    return "/".join(["/v1/sessions", *(quote(segment, safe="") for segment in (session_id, *rest))])


def control(
    session_id: str, name: str, body: InputModel, keyed: bool = True, timeout: Optional[float] = None
) -> Request:
    """A control, with an idempotency key (the caller's, or a new one) so that a retry is answered once."""
    wire = body.wire()
    headers: dict[str, str] = {}
    if keyed:
        headers["idempotency-key"] = str(wire.pop("idempotencyKey", None) or uuid.uuid4())
    return Request("POST", session_path(session_id, name), json=wire, headers=headers, timeout=timeout)


def read(path: str, timeout: Optional[float] = None, **params: Any) -> Request:
    query = {camel(k): _param(v) for k, v in params.items() if v is not None}
    return Request("GET", path, params=query, timeout=timeout)


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


def unavailable(detail: str, err: Optional[BaseException] = None) -> UnavailableError:
    return UnavailableError(detail, status=503, problem=Problem.make(503, "Unavailable", detail).wire())


class Deadline:
    """The time a call has left, retries and pauses included."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; raises UnavailableError once there are none."""
        left = self._at - time.monotonic()
        if left <= 0:
            raise unavailable(f"no answer from the gateway within {self.seconds:g} s")
        return left


def settle(
    req: Request,
    attempt: int,
    retries: int,
    deadline: Deadline,
    res: Optional[httpx.Response] = None,
    err: Optional[Exception] = None,
) -> tuple[bool, Any]:
    """One attempt's outcome: ``(True, body)`` when answered, ``(False, seconds)`` to send again after a pause; raises
    what the caller must see. Only a connection that was never made is retried (the request never arrived), and only
    a request that is safe to send twice; a request sent and not answered in time is not (the gateway may be at it)."""
    last = attempt >= retries
    if err is not None:
        if isinstance(err, httpx.TimeoutException) and not isinstance(err, httpx.ConnectTimeout):
            raise unavailable(f"no answer from the gateway within {deadline.seconds:g} s") from err
        if not req.retryable or last or not isinstance(err, (httpx.ConnectError, httpx.ConnectTimeout)):
            raise unavailable(f"the gateway cannot be reached: {err}") from err
        return False, min(backoff(attempt, None), deadline.left())
    assert res is not None
    if res.is_success:
        return True, (res.json() if res.content else None)
    error = problem_error(res.status_code, res.text)
    if last or not req.retryable or not error.retryable:
        raise error
    return False, min(backoff(attempt, res.headers.get("retry-after")), deadline.left())


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
