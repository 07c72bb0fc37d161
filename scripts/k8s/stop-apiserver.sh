#!/usr/bin/env bash
# Stops what start-apiserver.sh started in DIR: the API server, and etcd too unless --apiserver-only.
# Usage: bash scripts/k8s/stop-apiserver.sh DIR [--apiserver-only]
set -uo pipefail
R=${1:?usage: stop-apiserver.sh DIR [--apiserver-only]}
which=(apiserver etcd); [ "${2:-}" = --apiserver-only ] && which=(apiserver)
for name in "${which[@]}"; do
  f="$R/$name.pid"; [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
done
