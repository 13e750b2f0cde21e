#!/usr/bin/env bash
# Installs Debian's chromium for the Web UI test (test/ui/web-ui.test.ts drives the real Temporal Web UI in it through
# playwright-core, which downloads no browser of its own). Only as root on a machine with apt-get, as CI runs; anywhere
# else it does nothing, and when the install fails it says so; either way it exits 0, and that test skips and says why.
# Prints nothing when chromium is there already.
set -uo pipefail

CHROMIUM="/usr/bin/chromium"
[ -x "$CHROMIUM" ] && exit 0

# A developer's own machine is left alone: no sudo, no other package manager.
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  exit 0
fi
echo "installing chromium (Debian package) for the Web UI test" >&2
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
  "$CHROMIUM" --version 2>/dev/null >&2
else
  echo "could not install chromium with apt-get: the Web UI test will skip" >&2
fi
exit 0
