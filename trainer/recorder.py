"""Training recorder: loss and training parameters as JSON lines while training."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any, Dict, Optional, Union


class Recorder:
    """Appends one JSON object per line: a 'start' record (network, optimizer, settings), then a
    'step' record every `every` steps (step, loss, lr, elapsed seconds, optional metrics), then 'end'."""

    def __init__(self, path: Union[str, Path], every: int = 1, append: bool = False) -> None:
        self.path = Path(path)
        self.every = max(1, int(every))
        self._f: Optional[IO[str]] = open(self.path, "a" if append else "w", encoding="utf-8")
        self._t0 = time.monotonic()
        self._last_flush = self._t0

    def _write(self, rec: Dict[str, Any]) -> None:
        if self._f is None:
            raise ValueError("recorder is closed")
        self._f.write(json.dumps(rec, sort_keys=True) + "\n")
        now = time.monotonic()
        if now - self._last_flush > 1.0:
            self._f.flush()
            self._last_flush = now

    def start(self, **info: Any) -> None:
        """Record the run's settings."""
        self._write({"event": "start", "time": time.time(), **info})

    def step(self, step: int, loss: float, lr: float, force: bool = False, **metrics: Any) -> None:
        """Record one training step (only every `every` steps unless force)."""
        if force or step % self.every == 0:
            self._write(
                {
                    "event": "step",
                    "step": step,
                    "loss": loss,
                    "lr": lr,
                    "elapsed": round(time.monotonic() - self._t0, 4),
                    **metrics,
                }
            )

    def end(self, **info: Any) -> None:
        """Record the end of the run and close the file."""
        self._write({"event": "end", "elapsed": round(time.monotonic() - self._t0, 4), **info})
        self.close()

    def close(self) -> None:
        """Flush and close."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_log(path: Union[str, Path]) -> list:
    """The records of a JSON-lines log (a torn last line is skipped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
