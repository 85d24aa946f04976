"""Web Push in the page: the subscription behind the notifications toggle, and the worker's token.

* Turning notifications on subscribes this browser (``PushManager.subscribe`` with the server's
  VAPID key from ``pushConfig``) and registers the subscription for the signed-in person
  (``registerPushSubscription``: per user and device). Every start with notifications on registers
  it again (the server updates it), so a subscription the browser renewed is picked up.
* Turning them off unregisters it (``unregisterPushSubscription``) and unsubscribes.
* The service worker answers from a notification's buttons with the signed-in token, which it reads
  from IndexedDB (database ``turnwise``, store ``auth``, key ``token``), never from a push payload:
  ``store_token`` keeps it there on start and clears it on sign-out.

The browser calls are JavaScript (below) that never throws: each returns a JSON string, so a refused
subscription surfaces here as a value, not as an exception MicroPython may not see.
"""

import json

import js  # type: ignore[import-not-found]

try:  # noqa: SIM105, RUF100 - MicroPython has no contextlib
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

PUSH_CONFIG = "query PushConfig { pushConfig { vapidPublicKey } }"
REGISTER = (
    "mutation RegisterPush($endpoint: String!, $p256dh: String!, $auth: String!) {"
    " registerPushSubscription(endpoint: $endpoint, p256dh: $p256dh, auth: $auth) }"
)
UNREGISTER = "mutation UnregisterPush($endpoint: String!) { unregisterPushSubscription(endpoint: $endpoint) }"
# A push service that cannot be reached leaves subscribe() pending: the page stops waiting after this.
SUBSCRIBE_SECONDS = 20

HELPERS = r"""
const DB_NAME = "turnwise", STORE = "auth", KEY = "token";
const result = (value) => JSON.stringify(value);
const reason = (error) =>
  String((error && (error.name ? error.name + ": " : "") + (error.message || "")) || error);
const failed = (error) => result({ ok: false, error: reason(error) });
function keyBytes(text) {
  const padded = (text + "===".slice((text.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}
function sameKey(subscription, key) {
  const held = subscription.options && subscription.options.applicationServerKey;
  if (!held) return true;
  const mine = new Uint8Array(held);
  return mine.length === key.length && mine.every((b, i) => b === key[i]);
}
function withTimeout(promise, seconds, what) {
  return Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(what + " did not answer")), seconds * 1000)),
  ]);
}
function registration(seconds) {
  if (!("serviceWorker" in navigator) || !("PushManager" in self)) {
    return Promise.reject(new Error("no Push API"));
  }
  return withTimeout(navigator.serviceWorker.ready, seconds, "the service worker");
}
return {
  storeToken: (token) => new Promise((resolve) => {
    let open;
    try { open = indexedDB.open(DB_NAME, 1); } catch (error) { resolve(failed(error)); return; }
    open.onupgradeneeded = () => open.result.createObjectStore(STORE);
    open.onerror = () => resolve(failed(open.error));
    open.onsuccess = () => {
      const db = open.result;
      try {
        const tx = db.transaction(STORE, "readwrite");
        if (token) tx.objectStore(STORE).put(token, KEY); else tx.objectStore(STORE).delete(KEY);
        tx.oncomplete = () => { db.close(); resolve(result({ ok: true })); };
        tx.onerror = () => { db.close(); resolve(failed(tx.error)); };
      } catch (error) { db.close(); resolve(failed(error)); }
    };
  }),
  subscribe: async (vapidKey, seconds) => {
    try {
      const key = keyBytes(vapidKey);
      const reg = await registration(seconds);
      let subscription = await reg.pushManager.getSubscription();
      if (subscription && !sameKey(subscription, key)) {
        // Made for another server key (a new server): its pushes would not verify.
        await subscription.unsubscribe();
        subscription = null;
      }
      if (!subscription) {
        const asked = reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
        subscription = await withTimeout(asked, seconds, "the push service");
      }
      const json = subscription.toJSON();
      const keys = json.keys || {};
      const endpoint = json.endpoint || subscription.endpoint;
      return result({ ok: true, endpoint: endpoint, p256dh: keys.p256dh, auth: keys.auth });
    } catch (error) { return failed(error); }
  },
  unsubscribe: async (seconds) => {
    try {
      const reg = await registration(seconds);
      const subscription = await reg.pushManager.getSubscription();
      if (!subscription) return result({ ok: true, endpoint: null });
      const endpoint = subscription.endpoint;
      await subscription.unsubscribe();
      return result({ ok: true, endpoint: endpoint });
    } catch (error) { return failed(error); }
  },
};
"""

_helpers: Any = None


def _js() -> Any:
    global _helpers  # made once per page
    if _helpers is None:
        _helpers = js.Function.new(HELPERS)()
    return _helpers


def _parsed(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(str(text))
    except ValueError:
        return {"ok": False, "error": "unreadable answer from the browser"}
    return value if isinstance(value, dict) else {"ok": False, "error": "unreadable answer from the browser"}


def supported() -> bool:
    worker = bool(js.Reflect.has(js.navigator, "serviceWorker"))
    return worker and bool(js.Reflect.has(js.window, "PushManager"))


async def store_token(token: str | None) -> bool:
    """Keep the signed-in token where the service worker reads it (None clears it)."""
    if not bool(js.Reflect.has(js.window, "indexedDB")):
        return False
    outcome = _parsed(await _js().storeToken(token or ""))
    if not outcome.get("ok"):
        js.console.warn("keeping the token for the service worker failed: " + str(outcome.get("error")))
    return bool(outcome.get("ok"))


async def subscribe(http: Any) -> str | None:
    """Subscribe this browser and register it for the signed-in person; None, or why it failed."""
    if not supported():
        return "this browser has no Web Push"
    try:
        config = await http.query(PUSH_CONFIG)
        key = str(config["pushConfig"]["vapidPublicKey"])
    except Exception as error:  # noqa: BLE001 - reported on the page, never raised
        return "the server's push key could not be read (" + str(error) + ")"
    outcome = _parsed(await _js().subscribe(key, SUBSCRIBE_SECONDS))
    if not outcome.get("ok") or not outcome.get("endpoint"):
        return str(outcome.get("error") or "the browser gave no subscription")
    variables = {
        "endpoint": outcome["endpoint"],
        "p256dh": outcome.get("p256dh"),
        "auth": outcome.get("auth"),
    }
    try:
        await http.query(REGISTER, variables)
    except Exception as error:  # noqa: BLE001 - reported on the page, never raised
        return "the server did not take the subscription (" + str(error) + ")"
    return None


async def unsubscribe(http: Any | None) -> str | None:
    """Unsubscribe this browser; with ``http``, unregister it from the server too. None, or why not."""
    if not supported():
        return None
    outcome = _parsed(await _js().unsubscribe(5))
    if not outcome.get("ok"):
        return str(outcome.get("error"))
    endpoint = outcome.get("endpoint")
    if endpoint and http is not None:
        try:
            await http.query(UNREGISTER, {"endpoint": endpoint})
        except Exception as error:  # noqa: BLE001 - the push service drops it anyway once unsubscribed
            return "the server could not be told (" + str(error) + ")"
    return None
