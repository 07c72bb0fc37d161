#!/usr/bin/env bash
# Installs the real tools the monitoring and job-page tests drive:
#   promtool (Debian package `prometheus`) for `promtool check metrics|rules` and `promtool test rules`,
#   chromium (Debian package `chromium`) for the headless browser test of the job page.
# Idempotent: installs only what is missing. Waits for the dpkg lock instead of failing on it,
# because other setup scripts may be installing at the same time.
set -euo pipefail

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)

if [ "${#missing[@]}" -eq 0 ]; then
    echo "setup-views: promtool and chromium present"
    exit 0
fi

echo "setup-views: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_get() { apt-get -o DPkg::Lock::Timeout=600 "$@"; }
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}" fonts-dejavu-core >/dev/null

command -v promtool >/dev/null 2>&1 || { echo "setup-views: promtool still missing after install" >&2; exit 1; }
command -v chromium >/dev/null 2>&1 || { echo "setup-views: chromium still missing after install" >&2; exit 1; }
echo "setup-views: promtool $(promtool --version 2>&1 | head -1)"
echo "setup-views: $(chromium --version 2>/dev/null | head -1)"
