#!/usr/bin/env bash
# Installs pydantic 2.12.4 (the version hyperpod-elastic-agent 1.1.3 pins) under /var/cache/rankvisor
# for python3, so tests/pid1/hyperpod_agent.rs can validate /start bodies with the agent's own
# StartRequest model (server/api_models.py). Idempotent. Prints the directory to put on
# PYTHONPATH on its last line: RANKVISOR_TEST_PYDANTIC.
set -euo pipefail

version=2.12.4
cache=${RANKVISOR_CACHE:-/var/cache/rankvisor}
dest=$cache/pydantic-$version

if PYTHONPATH=$dest python3 -c "import pydantic, sys; sys.exit(pydantic.VERSION != '$version')" 2>/dev/null \
   && [ -d "$dest/pydantic" ]; then
  echo "setup-pydantic: pydantic $version present" >&2
  echo "$dest"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d "$cache/pydantic-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 -m pip install --quiet --disable-pip-version-check --target "$work" "pydantic==$version" >&2
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
PYTHONPATH=$dest python3 -c "import pydantic; assert pydantic.VERSION == '$version', pydantic.VERSION"
echo "setup-pydantic: pydantic $version in $dest" >&2
echo "$dest"
