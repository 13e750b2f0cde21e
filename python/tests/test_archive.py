"""Export from one deployment's gateway and import into another's, through the Python client. Run by
test/interop/python-archive.test.ts, which starts both deployments (each its own store and master key) and checks the
imported state byte for byte afterwards; skipped when run without them."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from durable_sessions import (
    AsyncClient,
    Client,
    InvalidInputError,
    MemoryRuntime,
    SnapshotCorruptError,
    SnapshotTamperedError,
)

ARCHIVE_ENV = ("SESSIONS_ARCHIVE_FROM", "SESSIONS_ARCHIVE_TO", "SESSIONS_ARCHIVE_REPORT")
pytestmark = pytest.mark.skipif(
    any(not os.environ.get(name) for name in ARCHIVE_ENV),
    reason="two deployments are needed: run through test/interop/python-archive.test.ts",
)

STATE = "state made in the first deployment"
PASSPHRASE = "from python"


def _gateway(name: str) -> tuple[str, str]:
    found = json.loads(os.environ[name])
    return str(found["url"]), str(found["key"])


@pytest.fixture
def here() -> Iterator[Client]:
    with Client(*_gateway("SESSIONS_ARCHIVE_FROM")) as c:
        yield c


@pytest.fixture
def there() -> Iterator[Client]:
    with Client(*_gateway("SESSIONS_ARCHIVE_TO")) as c:
        yield c


@pytest.fixture
async def athere() -> AsyncIterator[AsyncClient]:
    async with AsyncClient(*_gateway("SESSIONS_ARCHIVE_TO")) as c:
        yield c


def _report(key: str, value: str) -> None:
    path = Path(os.environ["SESSIONS_ARCHIVE_REPORT"])
    found = json.loads(path.read_text()) if path.exists() else {}
    found[key] = value
    path.write_text(json.dumps(found))


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with Client(*_gateway("SESSIONS_ARCHIVE_FROM")) as here:
        session_id = f"py-export-{uuid.uuid4().hex[:8]}"
        session = here.start(session_id, MemoryRuntime(initial_state=STATE))
        session.pause()
        out = tmp_path_factory.mktemp("archives") / "session.dsa"
        written = here.export_session(session_id, out, passphrase=PASSPHRASE)
        assert written == out.stat().st_size > 0
        _report("exported", session_id)
        return out


def test_export_then_import_into_another_deployment(there: Client, archive: Path) -> None:
    new_id = f"py-import-{uuid.uuid4().hex[:8]}"
    result = there.import_session(archive, passphrase=PASSPHRASE, session_id=new_id)
    assert result.session_id == new_id
    assert len(result.checkpoints) == 1
    assert there.get(new_id).wait_for("running").phase == "running"
    _report("imported", new_id)


async def test_the_async_client_imports_a_stream_paused(athere: AsyncClient, archive: Path) -> None:
    new_id = f"py-aimport-{uuid.uuid4().hex[:8]}"
    with open(archive, "rb") as f:
        result = await athere.import_session(f, passphrase=PASSPHRASE, session_id=new_id, paused=True)
    assert result.session_id == new_id
    assert (await athere.get(new_id).wait_for("paused")).phase == "paused"


def test_a_damaged_or_wrongly_keyed_archive_is_a_typed_error(there: Client, archive: Path) -> None:
    data = bytearray(archive.read_bytes())
    data[-5] ^= 0x10  # in the last record's authentication tag
    with pytest.raises(SnapshotTamperedError):
        there.import_session(bytes(data), passphrase=PASSPHRASE)
    with pytest.raises(SnapshotCorruptError):
        there.import_session(io.BytesIO(archive.read_bytes()[:-5]), passphrase=PASSPHRASE)
    with pytest.raises(SnapshotTamperedError):
        there.import_session(archive, passphrase="not it")
    with pytest.raises(InvalidInputError):
        there.import_session(archive, passphrase=PASSPHRASE, session_id="../x")
    with pytest.raises(InvalidInputError):
        there.import_session(archive)


def test_an_export_that_fails_leaves_no_file(here: Client, tmp_path: Path) -> None:
    out = tmp_path / "missing.dsa"
    with pytest.raises(InvalidInputError):
        here.export_session("py-no-such", out)
    with pytest.raises(Exception) as refused:
        here.export_session(f"py-none-{uuid.uuid4().hex[:8]}", out, passphrase=PASSPHRASE)
    assert refused.value.__class__.__name__ in ("SessionNotFoundError", "SnapshotNotFoundError")
    assert list(tmp_path.iterdir()) == []
