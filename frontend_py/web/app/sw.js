// Turnwise service worker: keeps the app shell and the local runtimes (PyScript, MicroPython) so the
// app opens from the home screen and says "offline" when the server cannot be reached. The server
// fills in the list and the version (backend/api/web.py); a new version replaces the old cache.
// The API and the operational endpoints are never cached: requests to them are not even touched.
"use strict";

const VERSION = "__VERSION__";
const CACHE = "turnwise-shell-" + VERSION;
const PRECACHE = __PRECACHE__;
const NEVER = ["/graphql", "/mcp", "/metrics", "/healthz", "/readyz"];
const APP_ROUTE = /^\/(t\/[^/]+(\/s\/[^/]+)?)?$/;

const OFFLINE_PAGE =
  '<!doctype html><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">' +
  "<title>Turnwise (offline)</title>" +
  '<body style="font-family:system-ui,sans-serif;display:flex;min-height:100vh;margin:0;align-items:center;' +
  'justify-content:center;background:#f6f7f9;color:#1f2430"><div style="text-align:center;padding:24px">' +
  '<h1 style="font-size:22px">Offline</h1><p style="color:#667085">The Turnwise server cannot be reached. ' +
  "Try again when it is back.</p></div></body>";

function neverCached(path) {
  return NEVER.some((prefix) => path === prefix || path.startsWith(prefix + "/"));
}

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll(PRECACHE.map((url) => new Request(url, { cache: "reload" }))))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) =>
        Promise.all(names.filter((n) => n.startsWith("turnwise-shell-") && n !== CACHE).map((n) => caches.delete(n))),
      )
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== self.location.origin || neverCached(url.pathname)) {
    return; // the browser handles it as if there were no worker
  }
  const navigation = request.mode === "navigate";
  event.respondWith(
    // Network first: a running server always serves today's files; the cache answers only offline.
    fetch(request)
      .then((response) => {
        if (response.ok && response.type === "basic") {
          const copy = response.clone();
          caches.open(CACHE).then((cache) => cache.put(navigation && APP_ROUTE.test(url.pathname) ? "/" : request, copy));
        }
        return response;
      })
      .catch(async () => {
        const cache = await caches.open(CACHE);
        const hit = await cache.match(navigation && APP_ROUTE.test(url.pathname) ? "/" : request, {
          ignoreSearch: navigation,
        });
        if (hit) return hit;
        if (navigation) {
          return new Response(OFFLINE_PAGE, { status: 503, headers: { "Content-Type": "text/html; charset=utf-8" } });
        }
        return Response.error();
      }),
  );
});

// Shown by the worker where a page cannot construct notifications (Android): the click focuses an
// open page, which activates the task; with none open it opens the session that asked.
self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const data = event.notification.data || {};
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((pages) => {
      if (pages.length > 0) {
        const page = pages[0];
        page.postMessage({ type: "notification-click", taskId: data.taskId, sessionId: data.sessionId });
        return page.focus();
      }
      const target = data.taskId ? "/t/" + data.taskId + (data.sessionId ? "/s/" + data.sessionId : "") : "/";
      return self.clients.openWindow(target);
    }),
  );
});
