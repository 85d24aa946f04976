#!/usr/bin/env bash
# Installs the browser runtimes from the npm registry at the versions frontend_py/package.json pins
# and copies what pages load into frontend_py/web/vendor/, so nothing is fetched from a CDN at run
# time. Idempotent: a stamp records what was installed, and a second run with nothing changed is a
# no-op. Set ASSETS_FORCE=1 to reinstall. The devDependencies are for the browser tests only (axe-core,
# injected into pages by tests/e2e from node_modules) and are never copied into vendor/.
set -euo pipefail
cd "$(dirname "$0")/.."
# npm's own notices (a newer npm, funding, audit) are not ours to show a person running `make run`.
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

front=frontend_py
modules=$front/node_modules
vendor=$front/web/vendor
stamp=$vendor/.installed

if ! command -v npm >/dev/null 2>&1; then
  echo "install-assets: npm is required (apt-get install -y npm)" >&2
  exit 1
fi

# The MCP conformance suite that tests/api runs against /mcp: a test tool from its own lock, never
# copied anywhere. Pinned at 0.1.13, the last release that runs on Node.js 20 (later ones need 22).
suite=tests/mcp_conformance
suite_fingerprint=$(cat "$suite/package.json" "$suite/package-lock.json" | sha1sum | cut -c1-16)
if [ "${ASSETS_FORCE:-}" = 1 ] || [ "$(cat "$suite/node_modules/.installed" 2>/dev/null)" != "$suite_fingerprint" ]; then
  echo "install-assets: installing the pinned MCP conformance suite"
  npm ci --prefix "$suite" --no-audit --no-fund --ignore-scripts --loglevel=error
  echo "$suite_fingerprint" > "$suite/node_modules/.installed"
fi

fingerprint=$(cat "$front/package.json" "$front/package-lock.json" 2>/dev/null | sha1sum | cut -c1-16)
if [ "${ASSETS_FORCE:-}" != 1 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fingerprint" ]; then
  exit 0
fi

echo "install-assets: installing pinned browser runtimes"
if [ -f "$front/package-lock.json" ]; then
  npm ci --prefix "$front" --include=dev --no-audit --no-fund --ignore-scripts --loglevel=error
else
  npm install --prefix "$front" --include=dev --no-audit --no-fund --ignore-scripts --loglevel=error
fi

# Refuse a tree that does not hold exactly the pinned versions (a stale lock, a manual install).
node - "$front" <<'JS'
const path = require("path");
const front = process.argv[2];
const manifest = require(path.resolve(front, "package.json"));
const pins = { ...manifest.dependencies, ...manifest.devDependencies };
let bad = 0;
for (const [name, want] of Object.entries(pins)) {
  const got = require(path.resolve(front, "node_modules", name, "package.json")).version;
  if (got !== want) { console.error(`install-assets: ${name} is ${got}, want ${want}`); bad = 1; }
}
process.exit(bad);
JS

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
