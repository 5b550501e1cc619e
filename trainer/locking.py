"""The one way an object of the package keeps a lock: its own re-entrant lock, which copies and pickles
leave behind (a copy or an unpickled object gets a new one)."""

from __future__ import annotations

import threading
from typing import Any, Dict


class OwnLock:
    """Base of the objects that hold a lock of their own (networks, optimizers): `_lock`, an RLock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __getstate__(self) -> Dict[str, Any]:
        """Copies and pickles leave the lock behind (a copy gets its own, see __setstate__)."""
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()
