"""Sync and async clients of the gateway. Each call is built once (``_calls``, ``_wire``) and sent by either transport.

Every call takes ``timeout``: the seconds it may take in all, retries included (the client's ``timeout`` when None).
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, Optional, TypeVar, Union

import httpx
from pydantic import BaseModel

from ._archives import ArchiveIn, ArchiveOut, chunks, export_request, import_request, sink, source
from ._wire import (
    Deadline,
    Request,
    SseParser,
    backoff,
    control,
    problem_error,
    read,
    session_path,
    settle,
    unavailable,
)
from .errors import ERROR_CLASSES, DurableSessionsError, error_from_problem
from .inputs import (
    AppendInput,
    BranchInput,
    CheckpointInput,
    ConfigureInput,
    ForkInput,
    ForkOverrides,
    Liveness,
    Message,
    PauseInput,
    Placement,
    RegenerateInput,
    ResumeInput,
    RetentionPolicy,
    RewindInput,
    RuntimeSpec,
    SessionPolicies,
    StartSessionInput,
    StopInput,
    VerifyInput,
    build,
    check_session_id,
)
from .models import (
    AppendResult,
    CheckpointRef,
    Event,
    ForkResult,
    ImportResult,
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
S = TypeVar("S")
Selector = Union[int, str]
RuntimeLike = Union[RuntimeSpec, Mapping[str, Any]]
PoliciesLike = Union[SessionPolicies, Mapping[str, Any]]
RetentionLike = Union[RetentionPolicy, Mapping[str, Any]]
LivenessLike = Union[Liveness, Mapping[str, Any]]
PlacementLike = Union[Placement, Mapping[str, Any]]
OverridesLike = Union[ForkOverrides, Mapping[str, Any]]
MessageLike = Union[Message, Mapping[str, Any]]
#: Phases a session never leaves: its event stream ends after them.
ENDED = ("completed", "failed")
#: The gateway sends a comment every 15 s on a quiet stream: silence well past that is a dead connection.
EVENTS_READ_TIMEOUT = 45.0


class Forks(builtins.list[S], Generic[S]):
    """The sessions a fork made, in order (a list), with ``from_``, the checkpoint they start from, and ``result``,
    the gateway's answer (each fork's first checkpoint)."""

    def __init__(self, sessions: Iterable[S], result: ForkResult) -> None:
        super().__init__(sessions)
        self.result = result
        self.from_: CheckpointRef = result.from_


def _start(spec: StartSessionInput, wait: bool, timeout: Optional[float]) -> Request:
    # Idempotent by its session id, not by a key: a retry after a lost answer finds the id in use.
    params = {} if wait else {"wait": "false"}
    return Request("POST", "/v1/sessions", json=spec.wire(), params=params, retryable=False, timeout=timeout)


def _spec(
    session_id: str,
    runtime: RuntimeLike,
    description: Optional[str],
    labels: Optional[Sequence[str]],
    liveness: Optional[LivenessLike],
    retention: Optional[RetentionLike],
    policies: Optional[PoliciesLike],
    background_verify: Optional[bool],
    placement: Optional[PlacementLike] = None,
) -> StartSessionInput:
    check_session_id(session_id)
    return build(
        StartSessionInput,
        session_id=session_id,
        runtime=runtime,
        description=description,
        labels=None if labels is None else builtins.list(labels),
        liveness=liveness,
        retention=retention,
        policies=policies,
        background_verify=background_verify,
        placement=placement,
    )


def _list(
    phase: Optional[str],
    runtime: Optional[str],
    label: Optional[str],
    forked_from: Optional[str],
    limit: Optional[int],
    cursor: Optional[str],
    timeout: Optional[float],
    host: Optional[str] = None,
) -> Request:
    filters = {"phase": phase, "runtime": runtime, "label": label, "forked_from": forked_from, "host": host}
    return read("/v1/sessions", timeout, **filters, limit=limit, cursor=cursor)


def _timeline(
    session_id: str,
    from_: Optional[int],
    limit: Optional[int],
    branch: Optional[int],
    all: Optional[bool],
    timeout: Optional[float],
) -> Request:
    path = session_path(session_id, "checkpoints")
    return read(path, timeout, from_=from_, limit=limit, branch=branch, all=all)


def _ended_error(status: SessionStatus, wanted: Optional[str] = None) -> Optional[DurableSessionsError]:
    """The error of a session that ended otherwise than ``wanted`` (it never gets there), or None."""
    if status.phase not in ENDED or status.phase == wanted:
        return None
    if status.phase == "completed":
        detail = f"session {status.session_id} has ended: no control can change it"
        return error_from_problem(409, Problem.make(409, "SessionClosed", detail, status.session_id).wire())
    # A failed session's failure names its error code in `type` (RestoreFailed, RuntimeFailed, …).
    failure = status.failure or {}
    code = str(failure.get("type") or "")
    code = code if code in ERROR_CLASSES else "SessionFailed"
    detail = f"session {status.session_id} has failed: {failure.get('message', 'no reason recorded')}"
    problem = {**Problem.make(409, code, detail, status.session_id).wire(), "failure": failure}
    return error_from_problem(409, problem)


def _event_headers(base: Mapping[str, str], last_event_id: Optional[str]) -> dict[str, str]:
    headers = {**base, "accept": "text/event-stream"}
    if last_event_id is not None:
        headers["last-event-id"] = last_event_id
    return headers


def _stream_timeout(read_timeout: float) -> httpx.Timeout:
    return httpx.Timeout(10.0, read=read_timeout)


class _Base:
    def __init__(self, base_url: str, api_key: str, retries: int, timeout: float) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {api_key}", "accept": "application/json"}
        self._retries = retries
        self._timeout = timeout

    def _url(self, req: Request) -> str:
        return f"{self._base}{req.path}"

    def _options(self, req: Request, left: float) -> dict[str, Any]:
        return {
            "json": req.json,
            "params": req.params,
            "headers": {**self._headers, **req.headers},
            "timeout": left,
        }

    def _deadline(self, req: Request) -> Deadline:
        return Deadline(self._timeout if req.timeout is None else req.timeout)


class Client(_Base):
    """Starts and finds sessions through the gateway at ``base_url`` with ``api_key``.

    Calls that are safe to repeat (reads, and controls, which always carry an idempotency key) are sent again on 503
    and 429 and when the gateway cannot be reached, ``retries`` times with backoff. Each call may take ``timeout``
    seconds in all (per call: its own ``timeout``).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 60.0, retries: int = 5) -> None:
        super().__init__(base_url, api_key, retries, timeout)
        self._http = httpx.Client()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, req: Request) -> Any:
        deadline = self._deadline(req)
        for attempt in range(self._retries + 1):
            try:
                res = self._http.request(req.method, self._url(req), **self._options(req, deadline.left()))
            except httpx.TransportError as err:
                done, value = settle(req, attempt, self._retries, deadline, err=err)
            else:
                done, value = settle(req, attempt, self._retries, deadline, res=res)
            if done:
                return value
            time.sleep(value)

    def start(
        self,
        session_id: str,
        runtime: RuntimeLike,
        *,
        wait: bool = True,
        description: Optional[str] = None,
        labels: Optional[Sequence[str]] = None,
        liveness: Optional[LivenessLike] = None,
        retention: Optional[RetentionLike] = None,
        policies: Optional[PoliciesLike] = None,
        background_verify: Optional[bool] = None,
        placement: Optional[PlacementLike] = None,
        timeout: Optional[float] = None,
    ) -> Session:
        """Starts a session; returns it once it runs, its status in ``last_status`` (``wait=False``: at once, with no
        status), or raises why it cannot (a session that failed at once: its failure)."""
        spec = _spec(
            session_id, runtime, description, labels, liveness, retention, policies, background_verify, placement
        )
        answer = self._send(_start(spec, wait, timeout))
        status = SessionStatus.model_validate(answer) if wait else None
        if status is not None and (error := _ended_error(status)) is not None:
            raise error
        return Session(self, session_id, last_status=status)

    def export_session(
        self,
        session_id: str,
        out: ArchiveOut,
        *,
        passphrase: Optional[str] = None,
        recipient_public_key: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        ancestors: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> int:
        """Writes a portable archive of a checkpoint of ``session_id`` (its newest unless ``checkpoint_id``; with
        ``ancestors``, its parent chain too) to ``out`` (a path, written whole or not at all, or a binary file), sealed
        with ``passphrase`` or for ``recipient_public_key`` (X25519, PEM). Streams: the archive is never held in
        memory. Returns the bytes written. The gateway needs DS_GATEWAY_ARCHIVES=on (else NotConfiguredError)."""
        req = export_request(session_id, passphrase, recipient_public_key, checkpoint_id, ancestors, timeout)
        written = 0
        try:
            with (
                sink(out) as f,
                self._http.stream("POST", self._url(req), **self._options(req, self._deadline(req).left())) as res,
            ):
                if not res.is_success:
                    res.read()
                    raise problem_error(res.status_code, res.text)
                for chunk in res.iter_bytes():
                    f.write(chunk)
                    written += len(chunk)
        except httpx.TransportError as err:
            raise unavailable(f"the export of {session_id} broke off: {err}") from err
        return written

    def import_session(
        self,
        archive: ArchiveIn,
        *,
        passphrase: Optional[str] = None,
        private_key: Optional[str] = None,
        session_id: Optional[str] = None,
        paused: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> ImportResult:
        """Starts a new session from ``archive`` (a path, bytes or a binary file, streamed) opened with ``passphrase``
        or ``private_key`` (X25519, PEM): the gateway verifies all of it first, and a damaged, cut or wrongly keyed
        archive raises (SnapshotTamperedError, SnapshotCorruptError, SnapshotIncompatibleError) having changed
        nothing. ``session_id``: the new id (default: the exported one's, marked imported); ``paused``: do not resume
        it. ``get(result.session_id)`` is the new session."""
        req = import_request(passphrase, private_key, session_id, paused, timeout)
        options = self._options(req, self._deadline(req).left())
        del options["json"]
        try:
            with source(archive) as content:
                res = self._http.post(self._url(req), content=content, **options)
        except httpx.TransportError as err:
            raise unavailable(f"the import broke off: {err}") from err
        if not res.is_success:
            raise problem_error(res.status_code, res.text)
        return ImportResult.model_validate(res.json())

    def get(self, session_id: str) -> Session:
        """The session ``session_id`` (nothing is sent; an id the gateway would refuse raises InvalidInputError)."""
        return Session(self, session_id)

    def list(
        self,
        *,
        phase: Optional[str] = None,
        runtime: Optional[str] = None,
        label: Optional[str] = None,
        forked_from: Optional[str] = None,
        host: Optional[str] = None,
        page_size: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Iterator[SessionSummary]:
        """Every session that matches, newest first, page after page (``page_size`` a request) as the loop goes."""
        cursor: Optional[str] = None
        while True:
            page = self.list_page(
                phase=phase,
                runtime=runtime,
                label=label,
                forked_from=forked_from,
                host=host,
                limit=page_size,
                cursor=cursor,
                timeout=timeout,
            )
            yield from page.sessions
            if page.next is None:
                return
            cursor = page.next

    def list_page(
        self,
        *,
        phase: Optional[str] = None,
        runtime: Optional[str] = None,
        label: Optional[str] = None,
        forked_from: Optional[str] = None,
        host: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> SessionPage:
        """One page of sessions, newest first; pass ``cursor=page.next`` for the page after (None on the last)."""
        req = _list(phase, runtime, label, forked_from, limit, cursor, timeout, host)
        return SessionPage.model_validate(self._send(req))


class Session:
    """One session's controls and views. Every control takes ``idempotency_key`` (one is made when absent), and those
    that may move the head ``if_head``/``if_index`` (refused with ConflictError when the head moved)."""

    def __init__(self, client: Client, session_id: str, *, last_status: Optional[SessionStatus] = None) -> None:
        self._client = client
        self.session_id = check_session_id(session_id)
        #: The newest status this handle read: the start's answer, then each ``status()``'s (None before any).
        self.last_status = last_status

    def __repr__(self) -> str:
        return f"Session({self.session_id!r})"

    def _do(self, req: Request, model: type[M]) -> M:
        return model.model_validate(self._client._send(req))

    def _forks(self, req: Request) -> Forks[Session]:
        result = self._do(req, ForkResult)
        return Forks([Session(self._client, f.session_id) for f in result.forks], result)

    def status(self, *, timeout: Optional[float] = None) -> SessionStatus:
        self.last_status = self._do(read(session_path(self.session_id), timeout), SessionStatus)
        return self.last_status

    def checkpoint(
        self,
        *,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> CheckpointRef:
        body = build(CheckpointInput, label=label, idempotency_key=idempotency_key, if_head=if_head, if_index=if_index)
        return self._do(control(self.session_id, "checkpoint", body, timeout=timeout), CheckpointRef)

    def pause(
        self,
        *,
        reason: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> CheckpointRef:
        body = build(PauseInput, reason=reason, idempotency_key=idempotency_key, if_head=if_head, if_index=if_index)
        return self._do(control(self.session_id, "pause", body, timeout=timeout), CheckpointRef)

    def resume(
        self,
        *,
        checkpoint_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> ResumeResult:
        body = build(
            ResumeInput,
            checkpoint_id=checkpoint_id,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return self._do(control(self.session_id, "resume", body, timeout=timeout), ResumeResult)

    def stop(
        self,
        *,
        checkpoint: Optional[bool] = None,
        reason: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> StopResult:
        body = build(
            StopInput,
            checkpoint=checkpoint,
            reason=reason,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return self._do(control(self.session_id, "stop", body, timeout=timeout), StopResult)

    def verify(
        self, *, checkpoint_id: Optional[str] = None, timeout: Optional[float] = None
    ) -> builtins.list[VerificationResult]:
        """Each checkpoint read back from the store on a worker; of a session that has ended, what it left there."""
        body = build(VerifyInput, checkpoint_id=checkpoint_id)
        return self._do(
            control(self.session_id, "verify", body, keyed=False, timeout=timeout), VerificationResults
        ).results

    def rewind(
        self,
        to: Optional[Selector] = None,
        *,
        message_index: Optional[int] = None,
        reason: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> RewindResult:
        """Back to checkpoint ``to`` (its timeline index or id), or (conversation) to ``message_index`` messages."""
        body = build(
            RewindInput,
            to=to,
            message_index=message_index,
            reason=reason,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return self._do(control(self.session_id, "rewind", body, timeout=timeout), RewindResult)

    def fork(
        self,
        from_: Optional[Selector] = None,
        *,
        message_index: Optional[int] = None,
        new_session_id: Optional[str] = None,
        count: Optional[int] = None,
        overrides: Optional[OverridesLike] = None,
        paused: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Forks[Session]:
        """New sessions from checkpoint ``from_`` (its index or id; default: the head), or (conversation) from the
        state after ``message_index`` messages. Returns the new sessions."""
        body = build(
            ForkInput,
            from_=from_,
            message_index=message_index,
            new_session_id=new_session_id,
            count=count,
            overrides=overrides,
            paused=paused,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return self._forks(control(self.session_id, "fork", body, timeout=timeout))

    def branch(
        self,
        *,
        new_session_id: Optional[str] = None,
        count: Optional[int] = None,
        overrides: Optional[OverridesLike] = None,
        paused: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Forks[Session]:
        """New sessions from the current state (a running session is checkpointed first)."""
        body = build(
            BranchInput,
            new_session_id=new_session_id,
            count=count,
            overrides=overrides,
            paused=paused,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return self._forks(control(self.session_id, "branch", body, timeout=timeout))

    def regenerate(
        self,
        *,
        new_session_id: Optional[str] = None,
        count: Optional[int] = None,
        overrides: Optional[OverridesLike] = None,
        paused: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Forks[Session]:
        """Conversation runtime: new sessions from just before the last assistant turn (the same user turn, to be
        answered again); the checkpoint holding the replaced turn is marked ``regenerated`` here."""
        body = build(
            RegenerateInput,
            new_session_id=new_session_id,
            count=count,
            overrides=overrides,
            paused=paused,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return self._forks(control(self.session_id, "regenerate", body, timeout=timeout))

    def append(
        self,
        messages: Sequence[MessageLike],
        *,
        checkpoint: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> AppendResult:
        """Conversation runtime: appends ``messages``; ``checkpoint=True`` checkpoints after them (trigger ``turn``)."""
        body = build(
            AppendInput,
            messages=builtins.list(messages),
            checkpoint=checkpoint,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return self._do(control(self.session_id, "append", body, timeout=timeout), AppendResult)

    def configure(
        self,
        *,
        policies: Optional[PoliciesLike] = None,
        retention: Optional[RetentionLike] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> SessionStatus:
        """Replaces the session's policies and/or retention; returns the status with them."""
        body = build(
            ConfigureInput,
            policies=policies,
            retention=retention,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        self.last_status = self._do(control(self.session_id, "configure", body, timeout=timeout), SessionStatus)
        return self.last_status

    def touch(self, *, timeout: Optional[float] = None) -> None:
        req = Request("POST", session_path(self.session_id, "touch"), json={}, timeout=timeout)
        self._client._send(req)

    def timeline(
        self,
        *,
        from_: Optional[int] = None,
        branch: Optional[int] = None,
        all: Optional[bool] = None,
        page_size: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Iterator[TimelineEntry]:
        """Every timeline entry from index ``from_`` on, in index order, page after page as the loop goes."""
        while True:
            page = self.timeline_page(from_=from_, limit=page_size, branch=branch, all=all, timeout=timeout)
            yield from page.entries
            if page.next is None:
                return
            from_ = page.next

    def timeline_page(
        self,
        *,
        from_: Optional[int] = None,
        limit: Optional[int] = None,
        branch: Optional[int] = None,
        all: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> TimelinePage:
        """One page of the timeline; ``from_=page.next`` for the page after (None at the end)."""
        return self._do(_timeline(self.session_id, from_, limit, branch, all, timeout), TimelinePage)

    def entry(self, index: int, *, timeout: Optional[float] = None) -> TimelineEntry:
        return self._do(read(session_path(self.session_id, "checkpoints", str(index)), timeout), TimelineEntry)

    def events(
        self, *, last_event_id: Optional[str] = None, read_timeout: float = EVENTS_READ_TIMEOUT
    ) -> Iterator[Event]:
        """The session's events (phase, progress, timeline) as they come; ends after the session has ended.

        Entries after index ``last_event_id`` come first (default: from now on). A connection that drops or stays
        silent ``read_timeout`` seconds is made again with ``Last-Event-ID`` (the last timeline entry's index), so no
        entry is missed; the phase is sent again on each connection. Raises after ``retries`` attempts in a row that
        got no event.
        """
        client = self._client
        url = f"{client._base}{session_path(self.session_id, 'events')}"
        if last_event_id is None:
            # From now on, as a new stream starts; named, so that a reconnection before the first entry misses none.
            last_event_id = str(self.status().timeline_length)
        failures = 0
        while True:
            ended = False
            try:
                headers = _event_headers(client._headers, last_event_id)
                with client._http.stream("GET", url, headers=headers, timeout=_stream_timeout(read_timeout)) as res:
                    if not res.is_success:
                        res.read()
                        error = problem_error(res.status_code, res.text)
                        if not error.retryable or failures >= client._retries:
                            raise error
                    else:
                        parser = SseParser()
                        for line in res.iter_lines():
                            event = parser.line(line)
                            if event is None:
                                continue
                            failures = 0
                            if event.id is not None:
                                last_event_id = event.id
                            if event.event == "phase":
                                ended = event.data.get("phase") in ENDED
                            yield event
            except httpx.TransportError as err:
                if failures >= client._retries:
                    raise unavailable(f"the event stream of {self.session_id} broke: {err}") from err
            if ended:
                return
            time.sleep(backoff(failures, None))
            failures += 1

    def wait_for(self, phase: str, timeout: float = 60.0, *, poll: float = 0.2) -> SessionStatus:
        """Waits until the session is in ``phase``; raises TimeoutError, or the session's failure if it failed."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status.phase == phase:
                return status
            error = _ended_error(status, phase)
            if error is not None:
                raise error
            if time.monotonic() >= deadline:
                raise TimeoutError(f"session {self.session_id} is {status.phase}, not {phase}, after {timeout} s")
            time.sleep(poll)


class AsyncClient(_Base):
    """The asyncio twin of Client: the same calls, awaited (``list`` and ``timeline`` are ``async for``)."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 60.0, retries: int = 5) -> None:
        super().__init__(base_url, api_key, retries, timeout)
        self._http = httpx.AsyncClient()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _send(self, req: Request) -> Any:
        deadline = self._deadline(req)
        for attempt in range(self._retries + 1):
            try:
                res = await self._http.request(req.method, self._url(req), **self._options(req, deadline.left()))
            except httpx.TransportError as err:
                done, value = settle(req, attempt, self._retries, deadline, err=err)
            else:
                done, value = settle(req, attempt, self._retries, deadline, res=res)
            if done:
                return value
            await asyncio.sleep(value)

    async def start(
        self,
        session_id: str,
        runtime: RuntimeLike,
        *,
        wait: bool = True,
        description: Optional[str] = None,
        labels: Optional[Sequence[str]] = None,
        liveness: Optional[LivenessLike] = None,
        retention: Optional[RetentionLike] = None,
        policies: Optional[PoliciesLike] = None,
        background_verify: Optional[bool] = None,
        placement: Optional[PlacementLike] = None,
        timeout: Optional[float] = None,
    ) -> AsyncSession:
        spec = _spec(
            session_id, runtime, description, labels, liveness, retention, policies, background_verify, placement
        )
        answer = await self._send(_start(spec, wait, timeout))
        status = SessionStatus.model_validate(answer) if wait else None
        if status is not None and (error := _ended_error(status)) is not None:
            raise error
        return AsyncSession(self, session_id, last_status=status)

    async def export_session(
        self,
        session_id: str,
        out: ArchiveOut,
        *,
        passphrase: Optional[str] = None,
        recipient_public_key: Optional[str] = None,
        checkpoint_id: Optional[str] = None,
        ancestors: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> int:
        """The asyncio twin of Client.export_session: the archive streamed into ``out``; returns the bytes written."""
        req = export_request(session_id, passphrase, recipient_public_key, checkpoint_id, ancestors, timeout)
        written = 0
        try:
            with sink(out) as f:
                async with self._http.stream(
                    "POST", self._url(req), **self._options(req, self._deadline(req).left())
                ) as res:
                    if not res.is_success:
                        await res.aread()
                        raise problem_error(res.status_code, res.text)
                    async for chunk in res.aiter_bytes():
                        f.write(chunk)
                        written += len(chunk)
        except httpx.TransportError as err:
            raise unavailable(f"the export of {session_id} broke off: {err}") from err
        return written

    async def import_session(
        self,
        archive: ArchiveIn,
        *,
        passphrase: Optional[str] = None,
        private_key: Optional[str] = None,
        session_id: Optional[str] = None,
        paused: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> ImportResult:
        """The asyncio twin of Client.import_session: the archive streamed to the gateway, then its answer."""
        req = import_request(passphrase, private_key, session_id, paused, timeout)
        options = self._options(req, self._deadline(req).left())
        del options["json"]
        try:
            with source(archive) as content:
                res = await self._http.post(self._url(req), content=chunks(content), **options)
        except httpx.TransportError as err:
            raise unavailable(f"the import broke off: {err}") from err
        if not res.is_success:
            raise problem_error(res.status_code, res.text)
        return ImportResult.model_validate(res.json())

    def get(self, session_id: str) -> AsyncSession:
        return AsyncSession(self, session_id)

    async def list(
        self,
        *,
        phase: Optional[str] = None,
        runtime: Optional[str] = None,
        label: Optional[str] = None,
        forked_from: Optional[str] = None,
        host: Optional[str] = None,
        page_size: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> AsyncIterator[SessionSummary]:
        cursor: Optional[str] = None
        while True:
            page = await self.list_page(
                phase=phase,
                runtime=runtime,
                label=label,
                forked_from=forked_from,
                host=host,
                limit=page_size,
                cursor=cursor,
                timeout=timeout,
            )
            for summary in page.sessions:
                yield summary
            if page.next is None:
                return
            cursor = page.next

    async def list_page(
        self,
        *,
        phase: Optional[str] = None,
        runtime: Optional[str] = None,
        label: Optional[str] = None,
        forked_from: Optional[str] = None,
        host: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> SessionPage:
        req = _list(phase, runtime, label, forked_from, limit, cursor, timeout, host)
        return SessionPage.model_validate(await self._send(req))


class AsyncSession:
    """The asyncio twin of Session."""

    def __init__(self, client: AsyncClient, session_id: str, *, last_status: Optional[SessionStatus] = None) -> None:
        self._client = client
        self.session_id = check_session_id(session_id)
        self.last_status = last_status

    def __repr__(self) -> str:
        return f"AsyncSession({self.session_id!r})"

    async def _do(self, req: Request, model: type[M]) -> M:
        return model.model_validate(await self._client._send(req))

    async def _forks(self, req: Request) -> Forks[AsyncSession]:
        result = await self._do(req, ForkResult)
        return Forks([AsyncSession(self._client, f.session_id) for f in result.forks], result)

    async def status(self, *, timeout: Optional[float] = None) -> SessionStatus:
        self.last_status = await self._do(read(session_path(self.session_id), timeout), SessionStatus)
        return self.last_status

    async def checkpoint(
        self,
        *,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> CheckpointRef:
        body = build(CheckpointInput, label=label, idempotency_key=idempotency_key, if_head=if_head, if_index=if_index)
        return await self._do(control(self.session_id, "checkpoint", body, timeout=timeout), CheckpointRef)

    async def pause(
        self,
        *,
        reason: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> CheckpointRef:
        body = build(PauseInput, reason=reason, idempotency_key=idempotency_key, if_head=if_head, if_index=if_index)
        return await self._do(control(self.session_id, "pause", body, timeout=timeout), CheckpointRef)

    async def resume(
        self,
        *,
        checkpoint_id: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> ResumeResult:
        body = build(
            ResumeInput,
            checkpoint_id=checkpoint_id,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return await self._do(control(self.session_id, "resume", body, timeout=timeout), ResumeResult)

    async def stop(
        self,
        *,
        checkpoint: Optional[bool] = None,
        reason: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> StopResult:
        body = build(
            StopInput,
            checkpoint=checkpoint,
            reason=reason,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return await self._do(control(self.session_id, "stop", body, timeout=timeout), StopResult)

    async def verify(
        self, *, checkpoint_id: Optional[str] = None, timeout: Optional[float] = None
    ) -> builtins.list[VerificationResult]:
        """Each checkpoint read back from the store on a worker; of a session that has ended, what it left there."""
        body = build(VerifyInput, checkpoint_id=checkpoint_id)
        req = control(self.session_id, "verify", body, keyed=False, timeout=timeout)
        return (await self._do(req, VerificationResults)).results

    async def rewind(
        self,
        to: Optional[Selector] = None,
        *,
        message_index: Optional[int] = None,
        reason: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> RewindResult:
        body = build(
            RewindInput,
            to=to,
            message_index=message_index,
            reason=reason,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return await self._do(control(self.session_id, "rewind", body, timeout=timeout), RewindResult)

    async def fork(
        self,
        from_: Optional[Selector] = None,
        *,
        message_index: Optional[int] = None,
        new_session_id: Optional[str] = None,
        count: Optional[int] = None,
        overrides: Optional[OverridesLike] = None,
        paused: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Forks[AsyncSession]:
        body = build(
            ForkInput,
            from_=from_,
            message_index=message_index,
            new_session_id=new_session_id,
            count=count,
            overrides=overrides,
            paused=paused,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return await self._forks(control(self.session_id, "fork", body, timeout=timeout))

    async def branch(
        self,
        *,
        new_session_id: Optional[str] = None,
        count: Optional[int] = None,
        overrides: Optional[OverridesLike] = None,
        paused: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Forks[AsyncSession]:
        body = build(
            BranchInput,
            new_session_id=new_session_id,
            count=count,
            overrides=overrides,
            paused=paused,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return await self._forks(control(self.session_id, "branch", body, timeout=timeout))

    async def regenerate(
        self,
        *,
        new_session_id: Optional[str] = None,
        count: Optional[int] = None,
        overrides: Optional[OverridesLike] = None,
        paused: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Forks[AsyncSession]:
        body = build(
            RegenerateInput,
            new_session_id=new_session_id,
            count=count,
            overrides=overrides,
            paused=paused,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return await self._forks(control(self.session_id, "regenerate", body, timeout=timeout))

    async def append(
        self,
        messages: Sequence[MessageLike],
        *,
        checkpoint: Optional[bool] = None,
        label: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> AppendResult:
        body = build(
            AppendInput,
            messages=builtins.list(messages),
            checkpoint=checkpoint,
            label=label,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        return await self._do(control(self.session_id, "append", body, timeout=timeout), AppendResult)

    async def configure(
        self,
        *,
        policies: Optional[PoliciesLike] = None,
        retention: Optional[RetentionLike] = None,
        idempotency_key: Optional[str] = None,
        if_head: Optional[str] = None,
        if_index: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> SessionStatus:
        body = build(
            ConfigureInput,
            policies=policies,
            retention=retention,
            idempotency_key=idempotency_key,
            if_head=if_head,
            if_index=if_index,
        )
        req = control(self.session_id, "configure", body, timeout=timeout)
        self.last_status = await self._do(req, SessionStatus)
        return self.last_status

    async def touch(self, *, timeout: Optional[float] = None) -> None:
        req = Request("POST", session_path(self.session_id, "touch"), json={}, timeout=timeout)
        await self._client._send(req)

    async def timeline(
        self,
        *,
        from_: Optional[int] = None,
        branch: Optional[int] = None,
        all: Optional[bool] = None,
        page_size: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> AsyncIterator[TimelineEntry]:
        while True:
            page = await self.timeline_page(from_=from_, limit=page_size, branch=branch, all=all, timeout=timeout)
            for entry in page.entries:
                yield entry
            if page.next is None:
                return
            from_ = page.next

    async def timeline_page(
        self,
        *,
        from_: Optional[int] = None,
        limit: Optional[int] = None,
        branch: Optional[int] = None,
        all: Optional[bool] = None,
        timeout: Optional[float] = None,
    ) -> TimelinePage:
        return await self._do(_timeline(self.session_id, from_, limit, branch, all, timeout), TimelinePage)

    async def entry(self, index: int, *, timeout: Optional[float] = None) -> TimelineEntry:
        return await self._do(read(session_path(self.session_id, "checkpoints", str(index)), timeout), TimelineEntry)

    async def events(
        self, *, last_event_id: Optional[str] = None, read_timeout: float = EVENTS_READ_TIMEOUT
    ) -> AsyncIterator[Event]:
        client = self._client
        url = f"{client._base}{session_path(self.session_id, 'events')}"
        if last_event_id is None:
            last_event_id = str((await self.status()).timeline_length)
        failures = 0
        while True:
            ended = False
            try:
                headers = _event_headers(client._headers, last_event_id)
                async with client._http.stream(
                    "GET", url, headers=headers, timeout=_stream_timeout(read_timeout)
                ) as res:
                    if not res.is_success:
                        await res.aread()
                        error = problem_error(res.status_code, res.text)
                        if not error.retryable or failures >= client._retries:
                            raise error
                    else:
                        parser = SseParser()
                        async for line in res.aiter_lines():
                            event = parser.line(line)
                            if event is None:
                                continue
                            failures = 0
                            if event.id is not None:
                                last_event_id = event.id
                            if event.event == "phase":
                                ended = event.data.get("phase") in ENDED
                            yield event
            except httpx.TransportError as err:
                if failures >= client._retries:
                    raise unavailable(f"the event stream of {self.session_id} broke: {err}") from err
            if ended:
                return
            await asyncio.sleep(backoff(failures, None))
            failures += 1

    async def wait_for(self, phase: str, timeout: float = 60.0, *, poll: float = 0.2) -> SessionStatus:
        deadline = time.monotonic() + timeout
        while True:
            status = await self.status()
            if status.phase == phase:
                return status
            error = _ended_error(status, phase)
            if error is not None:
                raise error
            if time.monotonic() >= deadline:
                raise TimeoutError(f"session {self.session_id} is {status.phase}, not {phase}, after {timeout} s")
            await asyncio.sleep(poll)
