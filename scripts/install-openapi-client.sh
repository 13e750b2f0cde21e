#!/usr/bin/env bash
# Test-only: installs openapi-python-client (a widely used OpenAPI client generator, from PyPI) into a venv of its own,
# .tools/openapi-venv, apart from the project's venv so its pins never meet the client's. The test
# test/gateway/generated-client.test.ts generates a client from the gateway's served document with it and drives a
# session through that client. `npm start` does not need it. Idempotent; prints nothing when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

GENERATOR_VERSION="0.29.1"
VENV=".tools/openapi-venv"

installed() {
  [ -x "$VENV/bin/openapi-python-client" ] &&
    [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("openapi-python-client"))' 2>/dev/null)" = "${GENERATOR_VERSION}" ]
}
if installed; then
  exit 0
fi
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/pip" ] || "$PYTHON" -m venv "$VENV"
echo "installing openapi-python-client ${GENERATOR_VERSION} into ${VENV} (tests only)" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check "openapi-python-client==${GENERATOR_VERSION}"
