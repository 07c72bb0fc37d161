#!/usr/bin/env bash
# Installs maturin (PyPI) into a venv cached outside the repository, for the wheel that carries the
# static rankvisor (images/build.sh --wheel; tests/heavy/install.rs):
#   $CACHE/venv-maturin-1.16.0 (about 20 MB; a second run finds it and takes < 1 s)
# CACHE is $RANKVISOR_CACHE, else /var/cache/rankvisor. Progress goes to stderr; the last line of
# stdout is the path of the maturin program.
set -euo pipefail
MATURIN_VERSION=1.16.0
CACHE=${RANKVISOR_CACHE:-/var/cache/rankvisor}
VENV_DIR=$CACHE/venv-maturin-$MATURIN_VERSION
PYTHON=${PYTHON:-python3}
log() { echo "scripts/setup-maturin.sh: $*" >&2; }

if [ -f "$VENV_DIR/.complete" ] && [ -x "$VENV_DIR/bin/maturin" ]; then
  log "maturin $MATURIN_VERSION cached in $VENV_DIR"
else
  t0=$SECONDS
  mkdir -p "$CACHE"
  # A venv's scripts embed its path, so it is built in place; `.complete` marks a finished one.
  rm -rf "$VENV_DIR"
  "$PYTHON" -m venv "$VENV_DIR"
  "$VENV_DIR/bin/python" -m pip install --quiet --no-cache-dir "maturin==$MATURIN_VERSION" >&2
  touch "$VENV_DIR/.complete"
  log "maturin $MATURIN_VERSION installed in $VENV_DIR: $((SECONDS - t0)) s"
fi
version=$("$VENV_DIR/bin/maturin" --version)
[ "$version" = "maturin $MATURIN_VERSION" ] || { log "$VENV_DIR/bin/maturin says '$version', expected maturin $MATURIN_VERSION" >&2; exit 1; }
echo "$VENV_DIR/bin/maturin"
