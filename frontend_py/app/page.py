"""What every part of the page shares: the transport, the store, the open route, the DOM's slots."""

from pyscript import document  # type: ignore[import-not-found]

from frontend_py.app import net
from frontend_py.kit import Lifetimes, Store

try:
    from collections.abc import Callable
    from typing import Any
except ImportError:  # MicroPython: annotations are never evaluated there
    pass

LIFETIMES = Lifetimes()  # listener proxies for the page, tasks until they end
REFUSED = "That token was not accepted. Sign in again."


def spawn(coroutine: Any) -> None:
    LIFETIMES.spawn(coroutine)


def js_none(value: Any) -> bool:
    return value is None or str(value) in ("null", "undefined")


def attr(element: Any, name: str) -> str | None:
    value = element.getAttribute(name)
    return None if js_none(value) else str(value)


class Page:
    """One signed-in page: each part reads the route and the store here, and asks for a render.

    ``render`` and ``sign_out`` are the app's: a part never draws anything but its own slots, and
    never decides what a refused token does to the rest of the page.
    """

    def __init__(
        self,
        http: net.Http,
        socket: net.Socket,
        store: Store,
        render: Callable[[bool], None],
        sign_out: Callable[[str | None], None],
    ) -> None:
        self.http = http
        self.socket = socket
        self.store = store
        self.route_task: str | None = None
        self.route_session: str | None = None
        self.signed_out = False
        self._render = render
        self._sign_out = sign_out
        self._html: dict[str, str] = {}

    def render(self, scroll: bool = False) -> None:
        self._render(scroll)

    def sign_out(self, message: str | None = None) -> None:
        self._sign_out(message)

    def set_html(self, element_id: str, html: str) -> bool:
        """Replace an element's content unless it is already ``html``; whether it changed."""
        if self._html.get(element_id) == html:
            return False
        self._html[element_id] = html
        document.getElementById(element_id).innerHTML = html
        return True
