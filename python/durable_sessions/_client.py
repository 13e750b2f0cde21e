"""Sync and async clients of the gateway. Each verb is built once (``_wire``) and sent by either transport."""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, Optional, TypeVar, Union

import httpx
from pydantic import BaseModel

from ._wire import Request, SseParser, control, problem_error, read, settle, to_wire
from .errors import error_from_problem
from .models import (
    CheckpointRef,
    Event,
    ForkResult,
    Problem,
    ResumeResult,
    RewindResult,
    SessionPage,
    SessionStatus,
    SessionSummary,
    StopResult,
    TimelineEntry,
    TimelinePage,
    VerificationResult,
    VerificationResults,
)

M = TypeVar("M", bound=BaseModel)
Selector = Union[int, str]
STABLE = ("running", "paused", "completed", "failed")


def _start(spec: dict[str, Any], wait: bool) -> Request:
    # Idempotent by its session id, not by a key: a retry after a lost answer finds the id in use.
    params = {} if wait else {"wait": "false"}
    return Request("POST", "/v1/sessions", json=to_wire(spec), params=params, retryable=False)


class _Base:
    def __init__(self, base_url: str, api_key: str, retries: int) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {api_key}", "accept": "application/json"}
        self._retries = retries

    def _url(self, req: Request) -> str:
        return f"{self._base}{req.path}"

    def _options(self, req: Request) -> dict[str, Any]:
        return {"json": req.json, "params": req.params, "headers": {**self._headers, **req.headers}}


class Client(_Base):
    """Starts and finds sessions through the gateway at ``base_url`` with ``api_key``.

    Calls that are safe to repeat (reads, and controls, which always carry an idempotency key) are sent again on 503
    and 429 and when the gateway cannot be reached, ``retries`` times with backoff.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 60.0, retries: int = 5) -> None:
        super().__init__(base_url, api_key, retries)
        self._http = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, req: Request) -> Any:
        for attempt in range(self._retries + 1):
            try:
                res = self._http.request(req.method, self._url(req), **self._options(req))
            except httpx.TransportError as err:
                done, value = settle(req, attempt, self._retries, err=err)
            else:
                done, value = settle(req, attempt, self._retries, res=res)
            if done:
                return value
            time.sleep(value)

    def start(self, session_id: str, runtime: dict[str, Any], *, wait: bool = True, **spec: Any) -> Session:
        """Starts a session; returns once it runs (``wait=False``: at once), or raises why it cannot."""
        self._send(_start({"session_id": session_id, "runtime": runtime, **spec}, wait))
        return Session(self, session_id)

    def get(self, session_id: str) -> Session:
        return Session(self, session_id)

    def list(self, **filters: Any) -> builtins.list[SessionSummary]:
        """One page of sessions by ``phase``, ``runtime``, ``label``, ``forked_from``, ``limit``, ``cursor``."""
        return self.list_page(**filters).sessions

    def list_page(self, **filters: Any) -> SessionPage:
        """Sessions newest first; pass ``cursor=page.next`` for the page after (``next`` is None on the last)."""
        return SessionPage.model_validate(self._send(read("/v1/sessions", **filters)))


class Session:
    """One session's controls and views. Every control takes ``idempotency_key`` (one is made when absent)."""

    def __init__(self, client: Client, session_id: str) -> None:
        self._client = client
        self.session_id = session_id

    def _do(self, req: Request, model: type[M]) -> M:
        return model.model_validate(self._client._send(req))

    def _control(self, name: str, model: type[M], **fields: Any) -> M:
        return self._do(control(self.session_id, name, fields), model)

    def status(self) -> SessionStatus:
        return self._do(read(f"/v1/sessions/{self.session_id}"), SessionStatus)

    def checkpoint(
        self, *, label: Optional[str] = None, idempotency_key: Optional[str] = None, **pre: Any
    ) -> CheckpointRef:
        return self._control("checkpoint", CheckpointRef, label=label, idempotency_key=idempotency_key, **pre)

    def pause(self, *, reason: Optional[str] = None, idempotency_key: Optional[str] = None) -> CheckpointRef:
        return self._control("pause", CheckpointRef, reason=reason, idempotency_key=idempotency_key)

    def resume(self, *, checkpoint_id: Optional[str] = None, idempotency_key: Optional[str] = None) -> ResumeResult:
        return self._control("resume", ResumeResult, checkpoint_id=checkpoint_id, idempotency_key=idempotency_key)

    def stop(
        self, *, checkpoint: Optional[bool] = None, reason: Optional[str] = None, idempotency_key: Optional[str] = None
    ) -> StopResult:
        fields = {"checkpoint": checkpoint, "reason": reason, "idempotency_key": idempotency_key}
        return self._control("stop", StopResult, **fields)

    def verify(self, *, checkpoint_id: Optional[str] = None) -> builtins.list[VerificationResult]:
        req = control(self.session_id, "verify", {"checkpoint_id": checkpoint_id}, keyed=False)
        return self._do(req, VerificationResults).results

    def rewind(self, to: Optional[Selector] = None, **fields: Any) -> RewindResult:
        return self._control("rewind", RewindResult, to=to, **fields)

    def fork(self, from_: Optional[Selector] = None, **fields: Any) -> ForkResult:
        return self._control("fork", ForkResult, from_=from_, **fields)

    def branch(self, **fields: Any) -> ForkResult:
        return self._control("branch", ForkResult, **fields)

    def configure(self, **fields: Any) -> SessionStatus:
        return self._control("configure", SessionStatus, **fields)

    def touch(self) -> None:
        self._client._send(control(self.session_id, "touch", {}, keyed=False))

    def timeline(
        self,
        *,
        from_: Optional[int] = None,
        limit: Optional[int] = None,
        branch: Optional[int] = None,
        all: Optional[bool] = None,
    ) -> TimelinePage:
        req = read(f"/v1/sessions/{self.session_id}/checkpoints", from_=from_, limit=limit, branch=branch, all=all)
        return self._do(req, TimelinePage)

    def entry(self, index: int) -> TimelineEntry:
        return self._do(read(f"/v1/sessions/{self.session_id}/checkpoints/{index}"), TimelineEntry)

    def events(self, *, last_event_id: Optional[str] = None) -> Iterator[Event]:
        """The session's events (phase, progress, timeline) as they come; ends when the session has ended."""
        headers = {**self._client._headers, "accept": "text/event-stream"}
        if last_event_id is not None:
            headers["last-event-id"] = last_event_id
        url = f"{self._client._base}/v1/sessions/{self.session_id}/events"
        with self._client._http.stream("GET", url, headers=headers, timeout=httpx.Timeout(None, connect=10)) as res:
            if not res.is_success:
                res.read()
                raise problem_error(res.status_code, res.text)
            parser = SseParser()
            for line in res.iter_lines():
                event = parser.line(line)
                if event is not None:
                    yield event

    def wait_for(self, phase: str, timeout: float = 60.0, *, poll: float = 0.2) -> SessionStatus:
        """Waits until the session is in ``phase``; raises TimeoutError, or the session's failure if it failed."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status.phase == phase:
                return status
            _check_ended(status, phase)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"session {self.session_id} is {status.phase}, not {phase}, after {timeout} s")
            time.sleep(poll)


class AsyncClient(_Base):
    """The asyncio twin of Client: the same verbs, awaited."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 60.0, retries: int = 5) -> None:
        super().__init__(base_url, api_key, retries)
        self._http = httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, req: Request) -> Any:
        for attempt in range(self._retries + 1):
            try:
                res = await self._http.request(req.method, self._url(req), **self._options(req))
            except httpx.TransportError as err:
                done, value = settle(req, attempt, self._retries, err=err)
            else:
                done, value = settle(req, attempt, self._retries, res=res)
            if done:
                return value
            await asyncio.sleep(value)

    async def start(self, session_id: str, runtime: dict[str, Any], *, wait: bool = True, **spec: Any) -> AsyncSession:
        await self._send(_start({"session_id": session_id, "runtime": runtime, **spec}, wait))
        return AsyncSession(self, session_id)

    def get(self, session_id: str) -> AsyncSession:
        return AsyncSession(self, session_id)

    async def list(self, **filters: Any) -> builtins.list[SessionSummary]:
        return (await self.list_page(**filters)).sessions

    async def list_page(self, **filters: Any) -> SessionPage:
        return SessionPage.model_validate(await self._send(read("/v1/sessions", **filters)))


class AsyncSession:
    """The asyncio twin of Session."""

    def __init__(self, client: AsyncClient, session_id: str) -> None:
        self._client = client
        self.session_id = session_id

    async def _do(self, req: Request, model: type[M]) -> M:
        return model.model_validate(await self._client._send(req))

    async def _control(self, name: str, model: type[M], **fields: Any) -> M:
        return await self._do(control(self.session_id, name, fields), model)

    async def status(self) -> SessionStatus:
        return await self._do(read(f"/v1/sessions/{self.session_id}"), SessionStatus)

    async def checkpoint(
        self, *, label: Optional[str] = None, idempotency_key: Optional[str] = None, **pre: Any
    ) -> CheckpointRef:
        return await self._control("checkpoint", CheckpointRef, label=label, idempotency_key=idempotency_key, **pre)

    async def pause(self, *, reason: Optional[str] = None, idempotency_key: Optional[str] = None) -> CheckpointRef:
        return await self._control("pause", CheckpointRef, reason=reason, idempotency_key=idempotency_key)

    async def resume(
        self, *, checkpoint_id: Optional[str] = None, idempotency_key: Optional[str] = None
    ) -> ResumeResult:
        return await self._control("resume", ResumeResult, checkpoint_id=checkpoint_id, idempotency_key=idempotency_key)

    async def stop(
        self, *, checkpoint: Optional[bool] = None, reason: Optional[str] = None, idempotency_key: Optional[str] = None
    ) -> StopResult:
        fields = {"checkpoint": checkpoint, "reason": reason, "idempotency_key": idempotency_key}
        return await self._control("stop", StopResult, **fields)

    async def verify(self, *, checkpoint_id: Optional[str] = None) -> builtins.list[VerificationResult]:
        req = control(self.session_id, "verify", {"checkpoint_id": checkpoint_id}, keyed=False)
        return (await self._do(req, VerificationResults)).results

    async def rewind(self, to: Optional[Selector] = None, **fields: Any) -> RewindResult:
        return await self._control("rewind", RewindResult, to=to, **fields)

    async def fork(self, from_: Optional[Selector] = None, **fields: Any) -> ForkResult:
        return await self._control("fork", ForkResult, from_=from_, **fields)

    async def branch(self, **fields: Any) -> ForkResult:
        return await self._control("branch", ForkResult, **fields)

    async def configure(self, **fields: Any) -> SessionStatus:
        return await self._control("configure", SessionStatus, **fields)

    async def touch(self) -> None:
        await self._client._send(control(self.session_id, "touch", {}, keyed=False))

    async def timeline(
        self,
        *,
        from_: Optional[int] = None,
        limit: Optional[int] = None,
        branch: Optional[int] = None,
        all: Optional[bool] = None,
    ) -> TimelinePage:
        req = read(f"/v1/sessions/{self.session_id}/checkpoints", from_=from_, limit=limit, branch=branch, all=all)
        return await self._do(req, TimelinePage)

    async def entry(self, index: int) -> TimelineEntry:
        return await self._do(read(f"/v1/sessions/{self.session_id}/checkpoints/{index}"), TimelineEntry)

    async def events(self, *, last_event_id: Optional[str] = None) -> AsyncIterator[Event]:
        headers = {**self._client._headers, "accept": "text/event-stream"}
        if last_event_id is not None:
            headers["last-event-id"] = last_event_id
        url = f"{self._client._base}/v1/sessions/{self.session_id}/events"
        async with self._client._http.stream(
            "GET", url, headers=headers, timeout=httpx.Timeout(None, connect=10)
        ) as res:
            if not res.is_success:
                await res.aread()
                raise problem_error(res.status_code, res.text)
            parser = SseParser()
            async for line in res.aiter_lines():
                event = parser.line(line)
                if event is not None:
                    yield event

    async def wait_for(self, phase: str, timeout: float = 60.0, *, poll: float = 0.2) -> SessionStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = await self.status()
            if status.phase == phase:
                return status
            _check_ended(status, phase)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"session {self.session_id} is {status.phase}, not {phase}, after {timeout} s")
            await asyncio.sleep(poll)


def _check_ended(status: SessionStatus, wanted: str) -> None:
    """A session that ended otherwise never reaches ``wanted``: say so at once."""
    if status.phase in ("completed", "failed") and wanted != status.phase:
        # A failed session's failure names its error code in `type` (RestoreFailed, RuntimeFailed, …).
        failure = status.failure or {}
        detail = f"session {status.session_id} is {status.phase}: {failure.get('message', 'it ended')}"
        code = str(failure.get("type") or "SessionClosed")
        raise error_from_problem(409, Problem.make(409, code, detail, status.session_id).wire())
