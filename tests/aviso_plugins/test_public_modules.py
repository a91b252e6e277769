"""Every public module of the plugin API says what it offers (``__all__``), and offers
everything public it defines: a name missing from ``__all__`` is either private (a leading
underscore) or an omission this test catches. What plugin authors are shown (the generated
plugin packages, docs/plugins.md, the example plugins) imports nothing else."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import aviso_plugins


def public_modules() -> list[str]:
    found = ["aviso_plugins"]
    for module in pkgutil.walk_packages(aviso_plugins.__path__, "aviso_plugins."):
        if not any(part.startswith("_") for part in module.name.split(".")):
            found.append(module.name)
    return sorted(found)


def defined_public_names(source: str) -> set[str]:
    """Top-level classes, functions and assigned names not starting with an underscore."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_")}


MODULES = public_modules()


def test_the_public_modules_are_found() -> None:
    assert {"aviso_plugins.types", "aviso_plugins.storage", "aviso_plugins.testing"} <= set(MODULES)
    assert not [name for name in MODULES if "._" in name]


@pytest.mark.parametrize("name", MODULES)
def test_a_public_module_lists_what_it_offers(name: str) -> None:
    module = importlib.import_module(name)
    offered = getattr(module, "__all__", None)
    assert isinstance(offered, list | tuple), f"{name} has no __all__"
    assert len(set(offered)) == len(offered), f"{name}.__all__ lists a name twice"
    unresolved = [entry for entry in offered if not hasattr(module, entry)]
    assert not unresolved, f"{name}.__all__ names what the module lacks: {unresolved}"
    unlisted = defined_public_names(inspect.getsource(module)) - set(offered)
    assert not unlisted, f"{name} defines public names missing from __all__: {sorted(unlisted)}"


def test_the_check_sees_each_kind_of_definition() -> None:
    source = (
        "import os\nfrom x import y\nA = 1\nB: int = 2\n_C = 3\n"
        "def f(): ...\nasync def g(): ...\nclass K: ...\nclass _L: ...\n"
    )
    assert defined_public_names(source) == {"A", "B", "f", "g", "K"}


ROOT = Path(__file__).resolve().parents[2]
# An import of the host, or of a private module of the plugin API.
NOT_PLUGIN_API = re.compile(
    r"^\s*(?:from|import)\s+(aviso_host\b[\w.]*|aviso_plugins(?:\.\w+)*\._\w+[\w.]*)", re.MULTILINE
)


def shown_to_plugin_authors() -> list[Path]:
    return sorted(
        [
            *(ROOT / "plugins" / "starter" / "templates" / "plugin").rglob("*.tmpl"),
            ROOT / "docs" / "plugins.md",
            *(ROOT / "tests" / "fixtures").rglob("*.py"),
        ]
    )


def test_the_check_finds_host_and_private_imports() -> None:
    text = (
        "from aviso_host.config import ConfigError\nimport aviso_host\n"
        "    from aviso_plugins._shared.numbers import parse_int_text\n"
        "from aviso_plugins.types import FieldHandler\nfrom aviso_plugins import hookimpl\n"
    )
    found = NOT_PLUGIN_API.findall(text)
    assert found == ["aviso_host.config", "aviso_host", "aviso_plugins._shared.numbers"]


@pytest.mark.parametrize("path", shown_to_plugin_authors(), ids=lambda path: path.name)
def test_what_plugin_authors_are_shown_imports_only_the_plugin_api(path: Path) -> None:
    found = NOT_PLUGIN_API.findall(path.read_text())
    assert not found, f"{path.relative_to(ROOT)} imports {found}"
