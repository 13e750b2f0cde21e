"""What export and import share between the sync and async clients: their requests, and where archive bytes go."""

from __future__ import annotations

import base64
import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO, Any, Optional, Union

from ._wire import Request, session_path
from .errors import InvalidInputError
from .inputs import ExportSessionInput, build, check_session_id

#: The media type of an archive, as the gateway sends and takes it.
ARCHIVE_MEDIA_TYPE = "application/octet-stream"
#: Bytes read from an archive file at a time while it is sent.
CHUNK = 1 << 20

PathLike = Union[str, "os.PathLike[str]"]
ArchiveOut = Union[PathLike, IO[bytes]]
ArchiveIn = Union[PathLike, bytes, IO[bytes]]


def export_request(
    session_id: str,
    passphrase: Optional[str],
    recipient_public_key: Optional[str],
    checkpoint_id: Optional[str],
    ancestors: Optional[bool],
    timeout: Optional[float],
) -> Request:
    one_of("passphrase", passphrase, "recipient_public_key", recipient_public_key)
    body = build(
        ExportSessionInput,
        passphrase=passphrase,
        recipient_public_key=recipient_public_key,
        checkpoint_id=checkpoint_id,
        ancestors=ancestors,
    )
    # Not sent again by itself: an answer cut mid-stream leaves an archive that never imports, and the caller decides.
    headers = {"accept": f"{ARCHIVE_MEDIA_TYPE}, application/problem+json"}
    path = session_path(session_id, "export")
    return Request("POST", path, json=body.wire(), headers=headers, retryable=False, timeout=timeout)


def import_request(
    passphrase: Optional[str],
    private_key: Optional[str],
    session_id: Optional[str],
    paused: Optional[bool],
    timeout: Optional[float],
) -> Request:
    one_of("passphrase", passphrase, "private_key", private_key)
    if session_id is not None:
        check_session_id(session_id)
    # The key goes in a header, base64 (a PEM's line breaks, any passphrase), never in the URL.
    secret = passphrase if passphrase is not None else private_key
    assert secret is not None
    name = "archive-passphrase" if passphrase is not None else "archive-private-key"
    headers = {"content-type": ARCHIVE_MEDIA_TYPE, name: base64.b64encode(secret.encode("utf-8")).decode("ascii")}
    params: dict[str, Any] = {}
    if session_id is not None:
        params["sessionId"] = session_id
    if paused is not None:
        params["paused"] = "true" if paused else "false"
    return Request("POST", "/v1/imports", params=params, headers=headers, retryable=False, timeout=timeout)


def one_of(name: str, value: Optional[str], other: str, other_value: Optional[str]) -> None:
    """Exactly one of two ways to give a key, else InvalidInputError before anything is sent."""
    if (value is None) == (other_value is None):
        detail = f"give exactly one of {name} and {other}"
        raise InvalidInputError(detail, status=400, problem={"code": "InvalidInput", "detail": detail})


@contextlib.contextmanager
def sink(out: ArchiveOut) -> Iterator[IO[bytes]]:
    """Where an export's bytes go. A path is written as a temp file beside it and renamed once whole: the file at
    the path is the whole archive or untouched."""
    if not isinstance(out, (str, os.PathLike)):
        yield out
        return
    target = Path(out)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=f".{uuid.uuid4().hex[:8]}.tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


@contextlib.contextmanager
def source(archive: ArchiveIn) -> Iterator[Union[bytes, IO[bytes]]]:
    """An archive to send: bytes as they are, a path opened, a binary file as it is (streamed by httpx)."""
    if isinstance(archive, (bytes, bytearray)):
        yield bytes(archive)
    elif isinstance(archive, (str, os.PathLike)):
        with open(archive, "rb") as f:
            yield f
    else:
        yield archive


async def chunks(archive: Union[bytes, IO[bytes]]) -> AsyncIterator[bytes]:
    """The archive as an async stream (what httpx.AsyncClient sends), a chunk at a time."""
    import asyncio

    if isinstance(archive, bytes):
        yield archive
        return
    while True:
        chunk = await asyncio.to_thread(archive.read, CHUNK)
        if not chunk:
            return
        yield chunk
