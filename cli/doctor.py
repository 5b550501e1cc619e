"""`mcutrain doctor`: which tools mcutrain can use here, and how to install the missing ones."""

from __future__ import annotations

import sys

import click

from .common import example
from .exit_codes import EXIT_MISSING_TOOL


@click.command()
@example("mcutrain doctor")
def doctor() -> None:
    """Check the tools mcutrain drives: PlatformIO, the host C compiler, the cross compilers, QEMU and
    simavr; print what each is for and how to install the missing ones. Exit code 4 when one is missing."""
    from mcutrain import isa
    from mcutrain.exporter.doctor import checks
    from mcutrain.version import __version__

    click.echo(f"mcutrain {__version__}, kernels: {isa.active()}, Python {sys.version.split()[0]}")
    found = checks()
    width = max(len(c.name) for c in found)
    for c in found:
        click.echo(f"  {'ok' if c.ok else 'MISSING':8s} {c.name:{width}s}  {c.detail[:60]:60s}  for {c.needed_for}")
    missing = [c for c in found if not c.ok]
    if not missing:
        click.echo("everything mcutrain uses is installed")
        return
    click.echo("to install what is missing (Debian/Ubuntu):")
    for cmd in dict.fromkeys(c.install for c in missing):
        click.echo(f"  {cmd}")
    sys.exit(EXIT_MISSING_TOOL)
