"""Every test docs/guarantees.md names exists.

The document cites tests as ``tests/path.py``, ``tests/path.py::name`` or, continuing the
last cited file, ``::name``; a name may be a glob (``test_notify_*``). Whether the cited
tests pass is the rest of the suite's business.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "guarantees.md"
CITATION = re.compile(r"`(tests/[\w/]+\.py)?(?:::([\w*\[\]-]+))?`")


# Most files are cited many times over: each is parsed once.
@functools.cache
def _test_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    )


def _citations() -> list[tuple[str, str | None]]:
    cited: list[tuple[str, str | None]] = []
    current: str | None = None
    for match in CITATION.finditer(DOCUMENT.read_text(encoding="utf-8")):
        path, name = match.groups()
        if path is None and name is None:
            continue
        current = path or current
        assert current is not None, f"`::{name}` cited before any test file"
        cited.append((current, name.split("[")[0] if name else None))
    return cited


def test_the_document_cites_tests() -> None:
    assert len(_citations()) >= 40


def test_every_cited_test_exists() -> None:
    missing = []
    for path, name in _citations():
        file = ROOT / path
        if not file.is_file():
            missing.append(path)
        elif name is not None and not fnmatch.filter(_test_names(file), name):
            missing.append(f"{path}::{name}")
    assert missing == []
