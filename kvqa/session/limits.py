"""Per-client limits: who a request comes from, and how many documents one client may hold open at once.

A client is the connection's address; behind a proxy (a Space, or KVQA_BEHIND_PROXY=1) it is the last X-Forwarded-For
hop, the one the proxy wrote: a client can write the hops before it itself.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

from kvqa.errors import KvqaError

S = TypeVar("S")  # a session: anything with .document and .closed (kvqa.session.session.Session)


def client_of(request, *, behind_proxy: bool) -> str:
    """Who is asking, for per-client limits, from an HTTP request (anything with .headers and .client, such as a
    gr.Request): the address the proxy saw when behind one, else the connection's address; "local" without one."""
    if request is None:
        return "local"
    forwarded = request.headers.get("x-forwarded-for", "") if behind_proxy else ""
    if forwarded.strip():
        return forwarded.split(",")[-1].strip()
    return getattr(request.client, "host", None) or "unknown"


class ClientSessions:
    """Each client's sessions, to bound how many documents one client holds: a session counts while it holds a
    document and is not closed (closing one frees its slot; a forgotten one stops counting when it is collected)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._sessions: dict[str, weakref.WeakSet] = {}  # client -> its sessions
        self._lock = threading.Lock()

    def open(self, client: str, make: Callable[[], S]) -> S:
        """A new session for `client`, from make(); KvqaError when the client already holds `limit` documents."""
        with self._lock:
            mine = self._sessions.setdefault(client, weakref.WeakSet())
            if sum(1 for s in list(mine) if s.document is not None and not s.closed) >= self.limit:
                raise KvqaError("busy.sessions_per_client", limit=self.limit)
            session = make()
            mine.add(session)
        return session

    def of(self, client: str) -> list:
        """The client's sessions that are still referenced, open or not."""
        with self._lock:
            return list(self._sessions.get(client, ()))
