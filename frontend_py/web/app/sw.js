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

// --- notifications ----------------------------------------------------------------------------------
// Web Push (the server's payload, see the API contract): {"type": "pending", "kind", "pendingId",
// "taskId", "sessionId", "url", "title", "body", "actions"} shows a notification tagged with the
// pending id; {"type": "close", "pendingId"} closes it (the action stopped being pending). A page
// that cannot construct notifications (Android) shows its own here with data {taskId, sessionId}.

const ICON = "/app/icon-192.png";
const DB_NAME = "turnwise"; // the page keeps the signed-in token here (frontend_py/app/push.py)
const DB_STORE = "auth";
const TOKEN_KEY = "token";
const CHECK_MS = 1000; // how long a page may take to say whether it shows the session

function readToken() {
  return new Promise((resolve) => {
    let open;
    try {
      open = indexedDB.open(DB_NAME, 1);
    } catch (error) {
      resolve(null);
      return;
    }
    open.onupgradeneeded = () => open.result.createObjectStore(DB_STORE);
    open.onerror = () => resolve(null);
    open.onsuccess = () => {
      const db = open.result;
      try {
        const read = db.transaction(DB_STORE, "readonly").objectStore(DB_STORE).get(TOKEN_KEY);
        read.onsuccess = () => {
          db.close();
          resolve(typeof read.result === "string" && read.result ? read.result : null);
        };
        read.onerror = () => {
          db.close();
          resolve(null);
        };
      } catch (error) {
        db.close();
        resolve(null);
      }
    };
  });
}

function windows() {
  return self.clients.matchAll({ type: "window", includeUncontrolled: true });
}

function tell(pages, message) {
  for (const page of pages) page.postMessage(message);
}

// Whether a page says it shows this session, visible and focused (a client's own url and focus
// cannot be trusted for that: the app changes routes without loading, and every tab may say focused).
function shownByAPage(pages, data) {
  const asks = pages.map(
    (page) =>
      new Promise((resolve) => {
        const channel = new MessageChannel();
        const timer = setTimeout(() => resolve(false), CHECK_MS);
        channel.port1.onmessage = (event) => {
          clearTimeout(timer);
          resolve(Boolean(event.data && event.data.showing));
        };
        page.postMessage(
          { type: "push-check", pendingId: data.pendingId, taskId: data.taskId, sessionId: data.sessionId },
          [channel.port2],
        );
      }),
  );
  return Promise.all(asks).then((answers) => answers.some(Boolean));
}

function sessionUrl(data) {
  if (typeof data.url === "string" && data.url.startsWith("/t/")) return data.url;
  return data.taskId ? "/t/" + data.taskId + (data.sessionId ? "/s/" + data.sessionId : "") : "/";
}

async function showPending(data) {
  const pages = await windows();
  if (pages.length > 0 && (await shownByAPage(pages, data))) return; // the person is looking at it
  const actions = Array.isArray(data.actions) ? data.actions.filter((a) => a && a.action && a.title) : [];
  const room = typeof Notification.maxActions === "number" ? Notification.maxActions : 0;
  // Offering some of a question's options would hide the others: all fit, or the card is the way.
  const shown = actions.length <= room ? actions : [];
  let body = String(data.body || "");
  if (actions.length > 0 && shown.length === 0) {
    body += (body ? "\n" : "") + (data.kind === "permission" ? "Open Turnwise to decide." : "Open Turnwise to choose.");
  }
  await self.registration.showNotification(String(data.title || "Turnwise"), {
    body: body,
    tag: data.pendingId,
    icon: ICON,
    actions: shown.map((a) => ({ action: String(a.action), title: String(a.title) })),
    data: {
      pendingId: data.pendingId,
      kind: data.kind,
      taskId: data.taskId,
      sessionId: data.sessionId,
      url: sessionUrl(data),
    },
  });
  // A page that raised its own notification for this action lets this one replace it.
  tell(pages, { type: "push-shown", pendingId: data.pendingId });
}

// A close push never shows anything. With no notification of that tag on this device (it was never
// shown here, or the person dismissed it) nothing more is done than tell open pages, which may hold
// their own notification of it. Chrome may count such a push as silent (docs/web-app.md, "Close").
async function closeTag(pendingId) {
  const shown = await self.registration.getNotifications({ tag: pendingId });
  for (const notification of shown) notification.close();
  const pages = await windows();
  if (pages.length > 0) tell(pages, { type: "push-closed", pendingId: pendingId });
}

async function onPush(event) {
  let data = null;
  try {
    data = event.data ? event.data.json() : null;
  } catch (error) {
    data = null;
  }
  if (!data || typeof data !== "object" || typeof data.pendingId !== "string" || !data.pendingId) return;
  if (data.type === "close") {
    await closeTag(data.pendingId);
  } else if (data.type === "pending") {
    await showPending(data);
  }
}

self.addEventListener("push", (event) => {
  event.waitUntil(onPush(event));
});

// --- answering from a notification's buttons ----------------------------------------------------------

const CLARIFICATION_QUESTIONS =
  "query PushQuestions($pendingId: ID!) { clarification(pendingId: $pendingId) {" +
  " questions { questionId options { id } } } }";
const RESPOND =
  "mutation PushRespond($pendingId: ID!, $answers: [ClarificationAnswerInput!]!) {" +
  " respondToClarification(pendingId: $pendingId, answers: $answers, rejected: false) {" +
  " __typename ... on ClarificationConflict { reason } ... on ClarificationDeliveryFailed { retryable } } }";
const RESPOND_PERMISSION =
  "mutation PushDecide($pendingId: ID!, $behavior: PermissionBehavior!) {" +
  " respondToPermission(pendingId: $pendingId, behavior: $behavior, remember: false) {" +
  " __typename ... on ClarificationConflict { reason } ... on ClarificationDeliveryFailed { retryable } } }";

class Unanswered extends Error {}

async function graphql(token, query, variables) {
  const response = await fetch("/graphql", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + token },
    body: JSON.stringify({ query: query, variables: variables }),
  });
  if (response.status === 401) throw new Unanswered("the stored sign-in was not accepted");
  const body = await response.json();
  if (body.errors && body.errors.length) throw new Unanswered(String(body.errors[0].message || "refused"));
  if (!response.ok || !body.data) throw new Unanswered("HTTP " + response.status);
  return body.data;
}

// The same mutations as the page's card and buttons, with the same conflict rules: the server says
// whether this choice still counts. Returns the response's __typename and fields.
async function answer(data, action) {
  const token = await readToken();
  if (!token) throw new Unanswered("not signed in on this device");
  if (data.kind === "permission" && (action === "allow" || action === "deny")) {
    const variables = { pendingId: data.pendingId, behavior: action === "allow" ? "ALLOW" : "DENY" };
    return (await graphql(token, RESPOND_PERMISSION, variables)).respondToPermission;
  }
  if (data.kind === "clarification" && action.startsWith("option:")) {
    const optionId = action.slice("option:".length);
    const found = (await graphql(token, CLARIFICATION_QUESTIONS, { pendingId: data.pendingId })).clarification;
    const questions = (found && found.questions) || [];
    const question = questions.find((q) => (q.options || []).some((o) => o.id === optionId));
    if (!question) throw new Unanswered("that choice is not one of the question's options");
    const answers = [{ questionId: question.questionId, selectedOptionIds: [optionId] }];
    return (await graphql(token, RESPOND, { pendingId: data.pendingId, answers: answers })).respondToClarification;
  }
  throw new Unanswered("an unknown button");
}

function followUp(data, title, body) {
  return self.registration.showNotification(title, {
    body: body,
    tag: data.pendingId,
    icon: ICON,
    data: { pendingId: data.pendingId, taskId: data.taskId, sessionId: data.sessionId, url: sessionUrl(data) },
  });
}

async function answerFromNotification(data, action) {
  let result;
  try {
    result = await answer(data, action);
  } catch (error) {
    console.warn("answering from a notification failed: " + error);
    return followUp(data, "Could not answer", "Your choice could not be sent. Open Turnwise to answer.");
  }
  const kind = result && result.__typename;
  if (kind === "ClarificationResponded" || kind === "PermissionResponded") return undefined;
  if (kind === "ClarificationConflict") {
    const what = data.kind === "permission" ? "This request was already decided" : "This question was already answered";
    const reason = result.reason === "SUPERSEDED" ? "The agent has moved on" : what;
    return followUp(data, "Already answered", reason + "; your choice was not sent.");
  }
  if (kind === "ClarificationDeliveryFailed" && !result.retryable) {
    return followUp(data, "Sent, not confirmed", "Your choice was accepted but the agent may not have received it.");
  }
  return followUp(data, "Could not answer", "The agent could not be reached. Open Turnwise to answer.");
}

// A click opens or focuses the app on the session; the page activates the task as its row does.
async function openSession(data) {
  const pages = await windows();
  if (pages.length > 0) {
    const page = pages.find((p) => p.visibilityState === "visible") || pages[0];
    page.postMessage({ type: "notification-click", taskId: data.taskId, sessionId: data.sessionId });
    try {
      await page.focus();
    } catch (error) {
      // Focusing needs the click's user activation; without it the page still activated the task.
    }
    return;
  }
  // A new page goes through the same activation, once it has loaded (see main.py: ?activate).
  await self.clients.openWindow(sessionUrl(data) + "?activate");
}

// What a click on a notification or one of its buttons does (``action`` is "" for the body).
async function onNotificationClick(notification, action) {
  notification.close();
  const data = notification.data || {};
  if (action) return answerFromNotification(data, action);
  return openSession(data);
}

self.addEventListener("notificationclick", (event) => {
  event.waitUntil(onNotificationClick(event.notification, event.action || ""));
});
