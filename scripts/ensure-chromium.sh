#!/usr/bin/env bash
# Makes sure Debian's Chromium is installed for the browser tests (Playwright drives it through
# executable_path; `playwright install` cannot download a browser here). Idempotent.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-chromium: /usr/bin/chromium is missing; run as root or: apt-get install -y chromium" >&2
  exit 1
fi
echo "ensure-chromium: installing chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
test -x /usr/bin/chromium
