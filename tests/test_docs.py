"""The documentation site (Sphinx, docs/conf.py): docs/*.md and the API reference from the docstrings build
with warnings as errors, and the pages hold what they should (every docs page, the API of the public names)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_documentation_site_builds_without_a_warning(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html", "docs", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, (
        "sphinx (pip install -e '.[test]') failed or warned:\n" + r.stdout[-2000:] + r.stderr[-4000:]
    )
    for page in ("index", "protocol", "embedding", "reliability", "adding-a-layer", "api"):
        assert (tmp_path / f"{page}.html").is_file(), page
    api = (tmp_path / "api.html").read_text()
    for name in ("train_batch", "save_model", "McuTrainError", "TrainParams", "Device", "require", "select"):
        assert 'id="mcutrain.' in api and f"{name}<" in api.replace("</span>", "<"), name
    assert "BLOB" in (tmp_path / "protocol.html").read_text()
