"""Training recorder: loss and training parameters as JSON lines while training."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Union

from .errors import DataError
from .files import read_bounded
from .plaindata import json_lines


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


MAX_LOG_BYTES = 1 << 30  # a log of a long run (a step record is about 120 bytes)
STEP_NUMBERS = ("step", "loss", "lr", "elapsed")  # the numbers of a step record (and every val_* metric)


def read_log(path: Union[str, Path]) -> List[Dict[str, Any]]:
    """The records of a JSON-lines log (a torn last line is skipped). DataError, naming the line, for a file
    that is not UTF-8 JSON lines, a line that is not a JSON object, or a step record whose step, loss,
    learning rate or metric is not a number."""
    raw = read_bounded(path, MAX_LOG_BYTES, "log", DataError)
    out: List[Dict[str, Any]] = []
    for line, rec in json_lines(raw, f"log {path}", DataError):
        if not isinstance(rec, dict):
            raise DataError(f"log {path} line {line} is not a record (a JSON object): is it from `mcutrain train`?")
        if rec.get("event") == "step":
            for key in [k for k in rec if k in STEP_NUMBERS or str(k).startswith("val_")]:
                v = rec[key]
                if key == "step" and v is None or not (v is None or _is_number(v)):
                    raise DataError(f"log {path} line {line}: {key} must be a number, got {v!r:.40}")
            if "step" not in rec:
                raise DataError(f"log {path} line {line}: a step record without its step number")
        out.append(rec)
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
