"""Where a message can send a user for the full story: a documentation file they have.

A wheel carries the docs inside the package (``pyamx/docs/``, copied there by
build.py); a source checkout has them in ``docs/`` next to the package. A
message that said "see docs/run.md" sent a wheel user to a folder they never
had. ``os`` only: ``pyamx run`` uses this and starts without other imports.
"""

from __future__ import annotations

import os

#: the project's documentation online (pyproject.toml's [project.urls]), for a copy without its docs
DOCS_URL = "https://pyamx.invalid/docs"


def doc(name: str, package_dir: str = os.path.dirname(os.path.abspath(__file__))) -> str:
    """The path of documentation file ``name`` ("run.md") in this copy of pyamx, else its URL."""
    for candidate in (os.path.join(package_dir, "docs", name),
                      os.path.join(os.path.dirname(package_dir), "docs", name)):
        if os.path.isfile(candidate):
            return candidate
    return f"{DOCS_URL}/{name}"
