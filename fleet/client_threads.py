"""The devices' Flower clients as threads of this process, and the client manager the server samples them
from.

Flower's legacy grpc-bidi transport ends a client's stream when the client has not answered within the
round's timeout, and a client's thread ends when the client raises. Flower's own SimpleClientManager then
waits up to a day for the missing client before the next round can sample it. Here the fleet owns the
threads: a client whose thread has ended is started again while the server waits for the clients, and the
server waits at most REJOIN_WAIT seconds before it goes on with the clients that are connected.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, List, Optional

from flwr.client import start_client
from flwr.server import SimpleClientManager

# seconds the server waits for every device's Flower client before a round goes on without the missing ones
REJOIN_WAIT = 10.0


class ClientThreads:
    """One thread per device client, each running Flower's client loop against the server start() was
    given. Safe to use from several threads (the server's sampling calls revive())."""

    def __init__(self, clients: List[Any]) -> None:
        self.clients = clients
        self.address: Optional[str] = None
        self._threads: List[Optional[threading.Thread]] = [None] * len(clients)
        self._lock = threading.Lock()

    def start(self, address: str) -> None:
        """Connect every client to the server at `address` (host:port)."""
        self.address = address
        self.revive()

    def _serve(self, client: Any, address: str) -> None:
        try:
            start_client(server_address=address, client=client, insecure=True)
        except Exception:  # the server ended the stream (a round timeout), or client.crash says why
            pass

    def revive(self) -> int:
        """Start the thread of every client that has none running (at first, or after its stream ended);
        a client that met an error in mcutrain's own code (client.crash) is not started again. Returns how
        many clients can be connected (those without a crash). Starts nothing before start()."""
        with self._lock:
            if self.address is None:
                return 0
            for i, c in enumerate(self.clients):
                t = self._threads[i]
                if (t is None or not t.is_alive()) and c.crash is None:
                    t = threading.Thread(
                        target=self._serve, args=(c, self.address), name=f"fleet-{c.name}", daemon=True
                    )
                    t.start()
                    self._threads[i] = t
            return sum(c.crash is None for c in self.clients)

    def join(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for each thread to end (after the server disconnected them)."""
        with self._lock:
            threads = [t for t in self._threads if t is not None]
        for t in threads:
            t.join(timeout=timeout)


class RejoiningClientManager(SimpleClientManager):
    """Flower's SimpleClientManager, but sample() waits at most `wait` seconds for the clients (calling
    `revive` meanwhile, so a client whose thread ended joins again; it returns how many clients can join)
    and then returns those connected, where Flower's waits up to a day for min_num_clients."""

    def __init__(self, revive: Callable[[], int], wait: float = REJOIN_WAIT) -> None:
        super().__init__()
        self.revive = revive
        self.wait = wait

    def sample(self, num_clients: int, min_num_clients: Optional[int] = None, criterion: Any = None) -> List[Any]:
        """Up to num_clients connected clients (that meet criterion); min_num_clients is not waited for."""
        deadline = time.monotonic() + self.wait
        while time.monotonic() < deadline:
            want = min(num_clients, self.revive())
            if self.num_available() >= want:
                break
            self.wait_for(want, timeout=0.1)  # type: ignore[arg-type]  # Flower types it int
        proxies = [p for p in list(self.all().values()) if criterion is None or criterion.select(p)]
        return proxies[:num_clients]


__all__ = ["REJOIN_WAIT", "ClientThreads", "RejoiningClientManager"]
