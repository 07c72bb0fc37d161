#!/usr/bin/env bash
# Installs the HyperPod elastic agent's source (PyPI hyperpod-elastic-agent 1.1.3, no dependencies:
# the log-rules differential test loads logagent/log_agent.py alone, which needs no torch) under
# /var/cache/rankvisor, and python3 (with pip) if missing. Idempotent. Prints the source directory
# (the one holding hyperpod_elastic_agent/) on its last line: RANKVISOR_TEST_HYPERPOD_AGENT.
set -euo pipefail

version=1.1.3
cache=${RANKVISOR_CACHE:-/var/cache/rankvisor}
dest=$cache/hyperpod-elastic-agent-$version
src=$dest/src

if [ -f "$src/hyperpod_elastic_agent/logagent/log_agent.py" ]; then
  echo "setup-hyperpod: hyperpod-elastic-agent $version present" >&2
  echo "$src"
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
  echo "setup-hyperpod: installing python3 and pip" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends python3 python3-pip >/dev/null
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/hyperpod-download.XXXXXX")
trap 'rm -rf "$work"' EXIT
# PyPI has only the source distribution of 1.1.3; --no-deps: nothing else is needed.
python3 -m pip download --quiet --no-deps --no-binary :all: "hyperpod-elastic-agent==$version" -d "$work" >&2
archive=$(ls "$work"/hyperpod_elastic_agent-"$version".tar.gz)
tar -xzf "$archive" -C "$work"
rm -rf "$dest"
mv "$work/hyperpod_elastic_agent-$version" "$dest"
test -f "$src/hyperpod_elastic_agent/logagent/log_agent.py" || { echo "setup-hyperpod: log_agent.py missing in the package" >&2; exit 1; }
echo "setup-hyperpod: hyperpod-elastic-agent $version in $dest" >&2
echo "$src"
