"""Sphinx configuration of mcutrain's documentation site: the pages of docs/ (Markdown, through MyST) and an
API reference generated from the docstrings (autodoc). Built in CI with warnings as errors:

    sphinx-build -W --keep-going -b html docs docs/_build/html
"""

import re

from mcutrain.version import __version__

project = "mcutrain"
author = "the mcutrain authors"
copyright = "2026, the mcutrain authors"  # noqa: A001 - Sphinx's name
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
html_theme = "alabaster"
html_static_path: list = []

# pages may step from a title (H1) straight to H3 sub-sections; that is a style choice, not an error
suppress_warnings = ["myst.header"]


def plain_docstring(app, what, name, obj, options, lines) -> None:  # noqa: ANN001 - Sphinx's hook signature
    """The docstrings are plain prose (not reStructuredText): hanging-indented lines continue the line above,
    and the characters reStructuredText would read as markup (*, |, a trailing _) are taken literally."""
    out: list = []
    for line in lines:
        text = line.replace("\\", "\\\\").replace("*", "\\*").replace("|", "\\|")
        text = re.sub(r"(\w)_(?=\W|$)", r"\1\\_", text)
        if out and out[-1].strip() and line[:1].isspace() and line.strip():
            out[-1] = out[-1].rstrip() + " " + text.strip()
        else:
            out.append(text)
    lines[:] = out


def setup(app) -> None:  # noqa: ANN001
    app.connect("autodoc-process-docstring", plain_docstring)
