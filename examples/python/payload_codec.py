"""The durable-sessions payload encryption for the Python Temporal SDK: the same AES-256-GCM envelope as the worker's
codec (src/payloads/codec.ts), so a Python caller reads and writes what the workers do, without a gateway.

An encrypted payload has the metadata ``encoding: binary/encrypted`` and ``encryption-key-id: <id>``, and its data is
``nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)``: AES-256-GCM of the original payload serialized as the protobuf
``temporal.api.common.v1.Payload`` (metadata and data), with additional data ``durable-sessions payload v1 <id>``.

Keys are configured as for a worker (docs/design.md §9.4): ``DS_PAYLOAD_KEY_DIR``, a directory of ``<id>.key`` files
(base64 of 32 random bytes, or the 32 bytes themselves; mode 0600); else ``DS_PAYLOAD_KEYS``, ``id:base64,id:base64``
(base64 or unpadded base64url of 32 bytes); else ``<DS_DATA_DIR>/payload-keys`` (``data/payload-keys`` by default,
where ``npm start`` makes its dev key) when it exists. New payloads are sealed under ``DS_PAYLOAD_KEY_PRIMARY``, else
the last key of the list or the greatest file id. ``DS_PAYLOAD_ENCRYPTION=none`` writes plaintext (what is encrypted
is still read with the keys found); otherwise no key is an error, so nothing is ever sent in plaintext to a deployment
that encrypts. Needs ``temporalio`` and ``cryptography``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

import temporalio.converter
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload

ENCRYPTED_ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class PayloadKeyError(Exception):
    """The payload keys cannot be loaded, or a payload names a key that is not among them."""


class PayloadTamperedError(Exception):
    """An encrypted payload failed authentication: altered, or sealed under another key of the same id."""


def _aad(key_id: str) -> bytes:
    # The key id is bound in: a payload relabelled with another id fails to authenticate instead of decrypting.
    return f"durable-sessions payload v1 {key_id}".encode()


class PayloadEncryptionCodec(temporalio.converter.PayloadCodec):
    """Seals every payload under the primary key (a fresh nonce each) when ``encrypt``; opens those sealed under any
    key it holds, and passes plaintext payloads through (histories from before encryption stay readable)."""

    def __init__(self, keys: Mapping[str, bytes], primary: Optional[str], *, encrypt: bool = True) -> None:
        if encrypt and (primary is None or primary not in keys):
            raise PayloadKeyError("encrypting payloads needs a primary payload key")
        self._keys = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self._primary = primary
        self._encrypt = encrypt

    @property
    def primary_key_id(self) -> Optional[str]:
        return self._primary if self._encrypt else None

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if not self._encrypt or self._primary is None:
            return list(payloads)
        key_id = self._primary
        sealed = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            data = nonce + self._keys[key_id].encrypt(nonce, payload.SerializeToString(), _aad(key_id))
            metadata = {"encoding": ENCRYPTED_ENCODING, KEY_ID_METADATA: key_id.encode()}
            sealed.append(Payload(metadata=metadata, data=data))
        return sealed

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(payload) for payload in payloads]

    def _open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCRYPTED_ENCODING:
            return payload
        raw_id = payload.metadata.get(KEY_ID_METADATA)
        if raw_id is None:
            raise PayloadTamperedError(f"an encrypted payload has no {KEY_ID_METADATA}")
        key_id = raw_id.decode("utf-8", "replace")
        key = self._keys.get(key_id)
        if key is None:
            raise PayloadKeyError(f"payload key '{key_id}' is not among the keys configured")
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise PayloadTamperedError(f"an encrypted payload of {len(data)} bytes is too short")
        try:
            plain = key.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], _aad(key_id))
        except InvalidTag:
            raise PayloadTamperedError(f"an encrypted payload under key '{key_id}' failed authentication") from None
        return Payload.FromString(plain)


def _decode_key(text: str, key_id: str, where: str) -> bytes:
    text = text.strip()
    try:
        if re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text):
            key = base64.b64decode(text, validate=True)
        elif re.fullmatch(r"[A-Za-z0-9_-]*", text):
            key = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        else:
            raise ValueError
    except (ValueError, binascii.Error):
        raise PayloadKeyError(f"payload key '{key_id}' {where} is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise PayloadKeyError(f"payload key '{key_id}' {where} is {len(key)} bytes; AES-256 needs {KEY_BYTES}")
    return key


def _keys_from_list(text: str) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    for number, entry in enumerate(text.split(","), 1):
        entry = entry.strip()
        if not entry:
            continue
        key_id, colon, value = entry.partition(":")
        key_id = key_id.strip()
        # Never echo the entry: without its colon it may be a bare key.
        if not colon or not KEY_ID.fullmatch(key_id):
            raise PayloadKeyError(f"DS_PAYLOAD_KEYS entry #{number} is not 'id:base64key'")
        if key_id in keys:
            raise PayloadKeyError(f"duplicate payload key id '{key_id}'")
        keys[key_id] = _decode_key(value, key_id, "in DS_PAYLOAD_KEYS")
    return keys


def _keys_from_directory(directory: Path) -> dict[str, bytes]:
    keys: dict[str, bytes] = {}
    for file in sorted(directory.glob("*.key")):
        key_id = file.name[: -len(".key")]
        if not KEY_ID.fullmatch(key_id):
            raise PayloadKeyError(f"key file {file}: key id is not valid")
        mode = file.stat().st_mode
        if os.name != "nt" and mode & 0o077:
            raise PayloadKeyError(f"key file {file} has mode {stat.S_IMODE(mode):04o}: chmod 600")
        content = file.read_bytes()
        keys[key_id] = (
            content if len(content) == KEY_BYTES else _decode_key(content.decode("latin-1"), key_id, f"in {file}")
        )
    if not keys:
        raise PayloadKeyError(f"no *.key files in {directory}")
    return keys


def codec_from_env(env: Mapping[str, str] = os.environ) -> PayloadEncryptionCodec:
    """The codec a worker with this environment uses (see the module's doc for the variables)."""
    encrypt = env.get("DS_PAYLOAD_ENCRYPTION", "aes-256-gcm") != "none"
    default_dir = Path(env.get("DS_DATA_DIR", "data")) / "payload-keys"
    if env.get("DS_PAYLOAD_KEY_DIR"):
        keys = _keys_from_directory(Path(env["DS_PAYLOAD_KEY_DIR"]))
        newest = max(keys)
    elif env.get("DS_PAYLOAD_KEYS"):
        keys = _keys_from_list(env["DS_PAYLOAD_KEYS"])
        newest = list(keys)[-1]
    elif default_dir.is_dir():
        keys = _keys_from_directory(default_dir)
        newest = max(keys)
    elif encrypt:
        raise PayloadKeyError(
            "no payload key: set DS_PAYLOAD_KEY_DIR or DS_PAYLOAD_KEYS as the workers have them, or DS_DATA_DIR to "
            f"the data folder of `npm start` ({default_dir} does not exist); DS_PAYLOAD_ENCRYPTION=none only for a "
            "deployment that does not encrypt"
        )
    else:
        return PayloadEncryptionCodec({}, None, encrypt=False)
    primary = env.get("DS_PAYLOAD_KEY_PRIMARY") or newest
    if primary not in keys:
        raise PayloadKeyError(f"primary payload key '{primary}' is not among the keys configured")
    return PayloadEncryptionCodec(keys, primary, encrypt=encrypt)


def data_converter(codec: PayloadEncryptionCodec) -> temporalio.converter.DataConverter:
    """The SDK's default converter with the codec; while it encrypts, failure messages and stack traces travel as an
    encoded (so encrypted) payload too, as the workers send theirs."""
    failures = (
        temporalio.converter.DefaultFailureConverterWithEncodedAttributes
        if codec.primary_key_id is not None
        else temporalio.converter.DefaultFailureConverter
    )
    return dataclasses.replace(temporalio.converter.default(), payload_codec=codec, failure_converter_class=failures)
