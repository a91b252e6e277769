"""Every hook has a docstring and a section in docs/plugins.md."""

import inspect
from pathlib import Path

import pytest

from aviso_plugins import hookspecs

DOC = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()
HOOKS = [
    name
    for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("aviso_")
]


def test_there_are_hooks() -> None:
    assert "aviso_field_handlers" in HOOKS and "aviso_storage_backends" in HOOKS


@pytest.mark.parametrize("name", HOOKS)
def test_hook_has_docstring(name: str) -> None:
    assert (getattr(hookspecs, name).__doc__ or "").strip()


@pytest.mark.parametrize("name", HOOKS)
def test_hook_has_a_section_in_docs(name: str) -> None:
    assert f"### {name}\n" in DOC
