#!/usr/bin/env bash
# Installs the S3 server the tests and benches run the S3 blob backend against: versitygw (Apache-2.0), built from the
# Go module proxy at a pinned version into .tools/s3/bin, once (about 3 minutes on 2 cores; 80 MB). It serves a real
# directory (`versitygw posix <dir>`) with conditional writes (`If-None-Match: *` on PutObject and
# CompleteMultipartUpload) and versioning. `scripts/install-test-tools.sh` runs it. Idempotent and offline after the
# first run; prints nothing when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSITYGW_VERSION="v1.8.0"
DIR=".tools/s3"
BIN="$DIR/bin/versitygw"
# `go install` stamps no version into the binary's --version: the stamp file beside it says which it is.
STAMP="$DIR/bin/versitygw.version"

if [ -x "$BIN" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$VERSITYGW_VERSION" ]; then
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "install-s3-server: the S3 server (versitygw ${VERSITYGW_VERSION}) is built with Go, and no 'go' is on PATH;" >&2
  echo "  install Go 1.25 or newer (https://go.dev/dl/) and run this again" >&2
  exit 1
fi

echo "installing the S3 server into ${DIR}/ (once): versitygw ${VERSITYGW_VERSION} from the Go module proxy (~3 min)" >&2
mkdir -p "$DIR/bin"
# Built into a scratch directory and moved into place whole, so an interrupted build never leaves a binary behind.
BUILD="$(mktemp -d "$DIR/build.XXXXXX")"
trap 'rm -rf "$BUILD"' EXIT
if ! GOBIN="$(cd "$BUILD" && pwd)" GOFLAGS="${GOFLAGS:-} -trimpath" go install \
  "github.com/versity/versitygw/cmd/versitygw@${VERSITYGW_VERSION}" >"$BUILD/log" 2>&1; then
  tail -n 20 "$BUILD/log" >&2
  echo "install-s3-server: building versitygw ${VERSITYGW_VERSION} failed (output above): the S3 backend's tests need it" >&2
  exit 1
fi
mv -f "$BUILD/versitygw" "$BIN"
echo "$VERSITYGW_VERSION" >"$STAMP"
echo "installed $BIN ($VERSITYGW_VERSION)" >&2
