# Shared by scripts/install-temporal.sh and scripts/install-test-tools.sh (sourced, not run): the tools venv, version
# checks that read installed metadata (no import, so a check is fast) and one install step with its progress line.
VENV=".tools/venv"
PYTHON="${PYTHON:-python3}"

# Reads the installed distribution's version, or nothing.
dist_version() {
  "$VENV/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null
}

ensure_venv() {
  if [ ! -x "$VENV/bin/pip" ]; then
    echo "creating the tools venv ${VENV} (Python: $("$PYTHON" --version 2>&1))" >&2
    "$PYTHON" -m venv "$VENV"
  fi
}

# pip_step N TOTAL WHAT PIP-ARGS...: one line saying what is fetched from PyPI, then its progress: on a terminal one
# line redrawn each second (seconds, MB downloaded and installed so far), elsewhere a line every 15 s; then the time.
pip_step() {
  local n="$1" total="$2" what="$3"
  shift 3
  local started=$SECONDS
  # pip downloads into TMPDIR: under .tools, the size of .tools counts what is downloaded as well as what is installed.
  local tmp=".tools/tmp"
  mkdir -p "$tmp"
  local before
  before=$(du -sm .tools/ | cut -f1)
  echo "[${n}/${total}] ${what}" >&2
  TMPDIR="$tmp" "$VENV/bin/pip" install --quiet --disable-pip-version-check "$@" &
  local pip=$! last=$SECONDS
  while kill -0 "$pip" 2>/dev/null; do
    sleep 1
    local mb=$(($(du -sm .tools/ 2>/dev/null | cut -f1) - before))
    if [ -t 2 ]; then
      printf '\r      %3d s, %4d MB' $((SECONDS - started)) "$mb" >&2
    elif [ $((SECONDS - last)) -ge 15 ]; then
      echo "      $((SECONDS - started)) s, ${mb} MB" >&2
      last=$SECONDS
    fi
  done
  local status=0
  wait "$pip" || status=$?
  [ -t 2 ] && printf '\r\033[K' >&2
  rm -rf "$tmp"
  if [ "$status" -ne 0 ]; then
    echo "      failed (pip exited ${status})" >&2
    return "$status"
  fi
  echo "      done in $((SECONDS - started)) s" >&2
}
