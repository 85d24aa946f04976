"""The GraphiQL page for support staff: local copies of the pinned npm assets and a token field.

Strawberry's default page loads React and GraphiQL from a CDN; this one loads the same files (same
SRI hashes) from /vendor/graphiql, which scripts/install-assets.sh fills from the npm registry.
The token is kept in the browser's local storage and sent as `Authorization: Bearer` on HTTP and
as `{"token": ...}` in the WebSocket connection_init payload.
"""

from __future__ import annotations

import json

VENDOR = "/vendor/graphiql"

# (file, sha384) for each asset, exactly the pinned npm files.
SCRIPTS = (
    ("react.production.min.js", "sha384-tMH8h3BGESGckSAVGZ82T9n90ztNXxvdwvdM6UoR56cYcf+0iGXBliJ29D+wZ/x8"),
    (
        "react-dom.production.min.js",
        "sha384-bm7MnzvK++ykSwVJ2tynSE5TRdN+xL418osEVF2DE/L/gfWHj91J2Sphe582B1Bh",
    ),
    ("js.cookie.min.js", "sha384-/vxhYfM1LENRhdpZ8dwEsQn/X4VhpbEZSiU4m/FwR+PVpzar4fkEOw8FP9Y+OfQN"),
    ("graphiql.min.js", "sha384-HbRVEFG0JGJZeAHCJ9Xm2+tpknBQ7QZmNlO/DgZtkZ0aJSypT96YYGRNod99l9Ie"),
    ("plugin-explorer.umd.js", "sha384-2oonKe47vfHIZnmB6ZZ10vl7T0Y+qrHQF2cmNTaFDuPshpKqpUMGMc9jgj9MLDZ9"),
)
STYLES = (
    ("graphiql.min.css", "sha384-Mq3vbRBY71jfjQAt/DcjxUIYY33ksal4cgdRt9U/hNPvHBCaT2JfJ/PTRiPKf0aM"),
    ("plugin-explorer.css", "sha384-5DFJlDPW2tSATRbM8kzoP1j194jexLswuNmClWoRr2Q0x7R68JIQzPHZ02Faktwi"),
)

EXAMPLE = """# Turnwise support console. Paste a token above, then run (Ctrl-Enter):
{
  tasks {
    id
    title
    summary { revision pendingAction }
    sessions { id state pendingAction pendingActionRevision { epoch sequence } }
  }
}
"""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Turnwise GraphiQL</title>
<link rel="icon" href="data:,">
<style>
  body { height: 100%; margin: 0; width: 100%; overflow: hidden; font-family: sans-serif; }
  #tokenbar { display: flex; gap: 8px; align-items: center; padding: 6px 12px;
              border-bottom: 1px solid #ddd; font-size: 13px; }
  #tokenbar input { flex: 1; max-width: 520px; font-family: monospace; }
  #graphiql { height: calc(100vh - 38px); display: flex; }
</style>
__STYLES__
__SCRIPTS__
</head>
<body>
<div id="tokenbar">
  <label for="turnwise-token">Bearer token</label>
  <input id="turnwise-token" data-testid="graphiql-token" type="password" autocomplete="off"
         placeholder="paste a token (kept in this browser's local storage)">
  <span id="turnwise-token-state"></span>
</div>
<div id="graphiql" class="graphiql-container">Loading...</div>
<script>
  const TOKEN_KEY = "turnwise.token";
  const EXAMPLE_QUERY = __EXAMPLE__;
  const hash = new URLSearchParams(window.location.hash.slice(1));
  if (hash.get("token")) {
    localStorage.setItem(TOKEN_KEY, hash.get("token"));
    history.replaceState(null, "", window.location.pathname + window.location.search);
  }
  const input = document.getElementById("turnwise-token");
  const state = document.getElementById("turnwise-token-state");
  function token() { return localStorage.getItem(TOKEN_KEY) || ""; }
  function showState() { state.textContent = token() ? "token set" : "no token"; }
  input.value = token();
  showState();
  input.addEventListener("input", function () {
    const value = input.value.trim();
    if (value) { localStorage.setItem(TOKEN_KEY, value); } else { localStorage.removeItem(TOKEN_KEY); }
    showState();
  });

  const url = window.location.href.split(/[?#]/)[0];
  const wsUrl = url.replace(/^http/, "ws");
  let held = null;
  let heldToken = null;
  function fetcherFor(t) {
    return GraphiQL.createFetcher({
      url: url,
      subscriptionUrl: wsUrl,
      headers: t ? { Authorization: "Bearer " + t } : {},
      wsConnectionParams: t ? { token: t } : {},
    });
  }
  // A new token takes effect on the next run, without reloading the page.
  function fetcher(params, options) {
    const t = token();
    if (held === null || t !== heldToken) { held = fetcherFor(t); heldToken = t; }
    return held(params, options);
  }

  function App() {
    return React.createElement(GraphiQL, {
      fetcher: fetcher,
      defaultQuery: EXAMPLE_QUERY,
      defaultEditorToolsVisibility: true,
      plugins: [GraphiQLPluginExplorer.explorerPlugin()],
      isHeadersEditorEnabled: true,
      shouldPersistHeaders: false,
    });
  }
  ReactDOM.createRoot(document.getElementById("graphiql")).render(React.createElement(App));
</script>
</body>
</html>
"""


def page() -> str:
    scripts = "\n".join(f'<script src="{VENDOR}/{name}" integrity="{sri}"></script>' for name, sri in SCRIPTS)
    styles = "\n".join(
        f'<link rel="stylesheet" href="{VENDOR}/{name}" integrity="{sri}">' for name, sri in STYLES
    )
    return (
        _PAGE.replace("__STYLES__", styles)
        .replace("__SCRIPTS__", scripts)
        .replace("__EXAMPLE__", json.dumps(EXAMPLE))
    )
