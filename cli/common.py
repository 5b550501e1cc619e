"""Shared pieces of the `mcutrain` command line: exit codes, the error policy, tables, progress
bars and the rules for output files (written atomically, never replaced without --force)."""

from __future__ import annotations

import inspect
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence

import click

from .exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_MISSING_TOOL, EXIT_NO_FIT, EXIT_TERMINATED, EXIT_USAGE

EXIT_CODES_HELP = f"""\b
Exit codes:
  0    success
  {EXIT_ERROR}    error (the message says what to do; --debug shows the traceback)
  {EXIT_USAGE}    bad command line (unknown option, missing argument, bad choice)
  {EXIT_NO_FIT}    the model does not fit the board's RAM or flash
  {EXIT_MISSING_TOOL}    a tool is missing: PlatformIO, a simulator or a toolchain
  {EXIT_INTERRUPTED}  interrupted with Ctrl-C (a first Ctrl-C lets train save a checkpoint and
       device train stop between samples; a second one stops at once)
  {EXIT_TERMINATED}  ended by SIGTERM or SIGHUP, handled as Ctrl-C; every program mcutrain started
       (simulators, firmware, builds) is ended with it"""


class CliError(click.ClickException):
    """An error for the user: one message, an exit code, no traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        """Print 'error: message' to stderr."""
        click.echo(f"error: {self.format_message()}", file=file or sys.stderr, err=file is None)


class MissingTool(CliError):
    """A program mcutrain needs (pio, a simulator, a compiler) is not installed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_MISSING_TOOL)


class NoFit(CliError):
    """The model does not fit the board."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_NO_FIT)


class Interrupted(CliError):
    """Ctrl-C (or SIGTERM/SIGHUP, handled the same way, exit code EXIT_TERMINATED); the message says what was
    kept."""

    def __init__(self, message: str = "interrupted") -> None:
        from mcutrain.processes import was_terminated

        super().__init__(message, EXIT_TERMINATED if was_terminated() else EXIT_INTERRUPTED)


def _user_error_types() -> tuple:
    """Exceptions whose message is written for the user: shown as they are, exit code 1."""
    from mcutrain.errors import McuTrainError

    return (McuTrainError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def translate(exc: BaseException) -> Optional[CliError]:
    """The CliError to show for an exception, or None to let it through (click's own exceptions)."""
    if isinstance(exc, (click.exceptions.Exit, click.ClickException, SystemExit, BrokenPipeError)):
        return None  # click's own handling (a closed pipe, e.g. `| head`, ends quietly)
    if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)):
        return Interrupted("interrupted")
    from mcutrain.exporter.memplan import MemoryPlanError

    if isinstance(exc, MemoryPlanError):
        return NoFit(str(exc))
    if isinstance(exc, _user_error_types()):
        if isinstance(exc, OSError) and exc.filename:
            return CliError(f"{exc.filename}: {exc.strerror or exc}")
        return CliError(str(exc))
    if isinstance(exc, OSError):
        return CliError(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    return CliError(f"unexpected {type(exc).__name__}: {exc} (run again with --debug to see where; please report it)")


class ErrorPolicyGroup(click.Group):
    """A group that turns exceptions into one-line messages with exit codes, unless --debug is on."""

    def make_context(
        self, info_name: Optional[str], args: List[str], parent: Optional[click.Context] = None, **extra: Any
    ) -> click.Context:
        """click's, with a Ctrl-C while the command line is read ending as any other: exit code 130."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt:
            raise Interrupted("interrupted") from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BaseException as e:  # noqa: B902 - every error goes through the policy
            debug = bool((ctx.obj or {}).get("debug") or ctx.params.get("debug"))
            err = translate(e)
            if err is None or (debug and not isinstance(e, CliError)):
                raise
            raise err from e


# ---- output files ----


class OutputPath(click.Path):
    """click.Path for a file or folder mcutrain writes: an empty name is a usage error (it would otherwise mean
    the default name, or no file at all, without a word)."""

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty: give a name, or leave the option out for the default", param, ctx)
        return super().convert(value, param, ctx)


def check_output(path: Path, force: bool, what: str = "output") -> Path:
    """Check, before any work starts, that the output file can be written: CliError for an empty name, a
    folder, an existing file without force, a folder on the way that is a file, or a folder that cannot
    be written (tried with a temporary file, removed at once). Makes the missing folders. Returns the path."""
    if not str(path) or str(path) in (".", ".."):
        raise CliError(f"give the {what} a file name")
    if path.is_dir():
        raise CliError(f"{path} is a folder; give the {what} a file name")
    if path.exists() and not force:
        raise CliError(f"{path} exists; pass --force to replace it or choose another {what} name")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CliError(f"cannot write the {what} {path}: {folder} is a file, not a folder") from None
    except OSError as e:
        raise CliError(f"cannot write the {what} {path}: cannot make the folder {folder} ({e.strerror})") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=str(folder))
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise CliError(f"cannot write the {what} {path}: {folder} is not writable ({e.strerror})") from None
    return path


def write_output(path: Path, data: bytes, force: bool, what: str = "output") -> None:
    """Write a file atomically, refusing to replace an existing one without force."""
    from mcutrain.files import atomic_write

    check_output(path, force, what)
    atomic_write(path, data)


# ---- text output ----


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Optional[Sequence[bool]] = None) -> str:
    """A plain text table; numbers are right-aligned unless `right` says otherwise."""
    cells = [[_cell(v) for v in r] for r in rows]
    if right is None:
        right = [all(isinstance(r[i], (int, float)) for r in rows) if rows else False for i in range(len(headers))]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if right[i] else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths))).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _cell(v: Any) -> str:
    """One table cell: yes/no, numbers with thousands separators, '-' for None."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isfinite(v) and v == int(v) and abs(v) < 1e15:
            return f"{int(v):,}"
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    return "-" if v is None else str(v)


def note(message: str) -> None:
    """A remark on stderr (never mixed into data on stdout)."""
    click.echo(message, err=True)


# ---- progress ----


class Progress:
    """A progress bar on stderr, shown only when stderr is a terminal and not --quiet."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled and sys.stderr.isatty()
        self.status = ""
        self._bar: Any = None
        self._label = label
        self._pending = 0
        self._drawn = 0.0

    def __enter__(self) -> Progress:
        if self.enabled:
            self._bar = click.progressbar(
                length=max(self.total, 1),
                label=self._label,
                file=sys.stderr,
                show_pos=True,
                show_eta=True,
                item_show_func=lambda _: self.status,
            )
            self._bar.__enter__()
        return self

    def update(self, n: int, status: str = "") -> None:
        """Advance by n and show status next to the bar (redrawn at most 10 times a second)."""
        self.status = status
        self._pending += n
        now = time.monotonic()
        if self._bar is not None and now - self._drawn >= 0.1:
            self._bar.update(self._pending, status)
            self._pending, self._drawn = 0, now

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            if self._pending:
                self._bar.update(self._pending, self.status)
            self._bar.__exit__(*exc)


def example(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Append an 'Example' section (kept as written) to a command's help."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        lines = "\n".join("  " + ln for ln in text.strip().splitlines())
        f.__doc__ = inspect.cleandoc(f.__doc__ or "") + "\n\n\b\nExample:\n" + lines + "\n"
        return f

    return deco
