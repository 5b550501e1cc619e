"""Fixtures shared by the test modules."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def pio_core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This test session's own tool folders, set in the environment (so subprocesses get them too) and
    restored at the end of the session:

    - PLATFORMIO_CORE_DIR: a PlatformIO core folder. PlatformIO registers a symlink:// platform by name per
      core folder, so sharing one with another checkout (or another session) breaks builds. Builds that run
      in parallel inside the session must each use a core folder of their own (test_pio_test, test_sim_avr).
    - PLATFORMIO_BUILD_CACHE_DIR: a build cache, so the core's objects are compiled once for all the exports
      with the same flags.
    - MCUTRAIN_CACHE: mcutrain's cache (the QEMU plugin, the simavr harness).

    Returns the PlatformIO core folder."""
    base = tmp_path_factory.mktemp("tools")
    core = base / "pio-core"
    mp = pytest.MonkeyPatch()
    mp.setenv("PLATFORMIO_CORE_DIR", str(core))
    mp.setenv("PLATFORMIO_BUILD_CACHE_DIR", str(base / "pio-build-cache"))
    mp.setenv("MCUTRAIN_CACHE", str(base / "mcutrain-cache"))
    try:
        yield core
    finally:
        mp.undo()


@pytest.fixture(autouse=True)
def flower_deprecations_fail() -> Iterator[None]:
    """A test that makes Flower log a deprecation (Flower logs them on its 'flwr' logger, not as Python
    warnings, which pyproject's filterwarnings turns into errors) fails."""
    import logging

    seen: list = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "deprecat" in record.getMessage().lower():
                seen.append(record.getMessage())

    handler = Catch(logging.WARNING)
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    assert not seen, f"Flower logged a deprecation: {seen[0]}"
