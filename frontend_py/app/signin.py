"""Signing in: the token from the address or local storage, and the sign-in form."""

from pyscript import document, window  # type: ignore[import-not-found]
from pyscript.ffi import create_proxy  # type: ignore[import-not-found]

from frontend_py.app import net, queries
from frontend_py.app.page import LIFETIMES, js_none, spawn

try:
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

TOKEN_KEY = "turnwise.token"


def read_token() -> str | None:
    """``#token=...`` signs in: kept in local storage and removed from the address bar."""
    location = window.location
    fragment = str(location.hash or "")
    if fragment.startswith("#token="):
        token = str(window.decodeURIComponent(fragment[7:]))
        if token:
            window.localStorage.setItem(TOKEN_KEY, token)
        window.history.replaceState(None, "", str(location.pathname) + str(location.search or ""))
    stored = window.localStorage.getItem(TOKEN_KEY)
    return None if js_none(stored) or not str(stored) else str(stored)


def forget_token() -> None:
    window.localStorage.removeItem(TOKEN_KEY)


def show_signin(message: str | None = None) -> None:
    document.getElementById("boot").hidden = True
    panel = document.getElementById("signin")
    panel.hidden = False
    note = document.getElementById("signin-note")
    note.textContent = message or ""
    form = document.getElementById("signin-form")
    field = document.getElementById("signin-token")
    button = form.querySelector("button[type=submit]")
    if message:
        field.setAttribute("aria-invalid", "true")

    async def check(value: str) -> None:
        # The token is tried before it is kept: a refused one stays in the field to be corrected.
        button.disabled = True
        note.textContent = ""
        refused = None
        try:
            await net.Http(str(window.location.origin) + "/graphql", value).query(queries.SIGN_IN_CHECK)
        except net.Unauthorized:
            refused = "That token was not accepted. Check it and try again."
        except Exception:  # noqa: BLE001 - no answer at all: the server cannot be reached
            refused = "Could not reach the server. Try again in a moment."
        button.disabled = False
        if refused is not None:
            note.textContent = refused
            field.setAttribute("aria-invalid", "true")
            field.focus()
            return
        window.localStorage.setItem(TOKEN_KEY, value)
        window.location.reload()

    def submit(event: Any) -> None:
        event.preventDefault()
        value = str(field.value).strip()
        if value and not button.disabled:
            spawn(check(value))

    def edited(_event: Any) -> None:
        field.removeAttribute("aria-invalid")

    form.addEventListener("submit", LIFETIMES.keep(create_proxy(submit)))
    field.addEventListener("input", LIFETIMES.keep(create_proxy(edited)))
