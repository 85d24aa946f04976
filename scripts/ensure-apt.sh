#!/usr/bin/env bash
# Makes sure a Debian package the tests drive is installed: `ensure-apt.sh BINARY PACKAGE`.
# Chromium for the browser tests (Playwright drives it through executable_path; `playwright
# install` cannot download a browser here), PgBouncer for the database-fault tests. Idempotent.
set -euo pipefail

binary=$1 package=$2
if [ -x "$binary" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "ensure-apt: $binary is missing; run as root or: apt-get install -y $package" >&2
  exit 1
fi
echo "ensure-apt: installing $package"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "$package" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$package" >/dev/null; }
test -x "$binary"
