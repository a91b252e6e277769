"""No installed package imports a dependency's private names: no ``import a._b``, no
``from a._b import c``, no ``from a import _b`` where ``a`` is not one of this project's own
packages. Private modules and attributes change without notice between releases, so a
dependency is used only through its public API (and pinned up to its next major only).

A module whose name starts with an underscore only because its library marks it experimental,
and documents it, is public API all the same: ``DOCUMENTED`` lists each, with its page."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def own_packages() -> dict[str, Path]:
    """setup.cfg's ``package_dir``: installed name -> source folder."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    pairs = (line.split("=") for line in setup["options"]["package_dir"].strip().splitlines())
    return {name.strip(): ROOT / folder.strip() for name, folder in pairs}


PACKAGES = own_packages()
OWN = frozenset({*PACKAGES, "tests", "benchmarks"})
_OTEL_DOCS = "https://opentelemetry-python.readthedocs.io/en/latest"
DOCUMENTED = {
    # OpenTelemetry's logs signal, experimental in its Python API and SDK.
    "opentelemetry._logs": f"{_OTEL_DOCS}/api/_logs.html",
    "opentelemetry.sdk._logs": f"{_OTEL_DOCS}/sdk/_logs.html",
    "opentelemetry.sdk._logs.export": f"{_OTEL_DOCS}/sdk/_logs.export.html",
    "opentelemetry.exporter.otlp.proto.grpc._log_exporter": f"{_OTEL_DOCS}/exporter/otlp/otlp.html",
    "opentelemetry.exporter.otlp.proto.http._log_exporter": f"{_OTEL_DOCS}/exporter/otlp/otlp.html",
}


def is_private(dotted: str) -> bool:
    """Dunder names (``__future__``, ``__version__``) are public by convention, and so are
    the documented modules and the public names they export."""
    documented = [m for m in DOCUMENTED if dotted == m or dotted.startswith(f"{m}.")]
    if documented:
        dotted = dotted.removeprefix(max(documented, key=len)).lstrip(".")
    return any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in dotted.split(".")
    )


def private_imports(source: str, filename: str) -> list[str]:
    """``line: name`` for each private name of a foreign package ``source`` imports."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.extend(
            f"{node.lineno}: {name}"
            for name in names
            if name.split(".")[0] not in OWN and is_private(name)
        )
    return found


def test_the_check_finds_each_form_of_private_import() -> None:
    source = (
        "import a._b\n"
        "from a._b import c\n"
        "from a import _b, c\n"
        "from __future__ import annotations\n"
        "from . import _own\n"
        "from aviso_host import _own\n"
        "import a.b\n"
        "from opentelemetry.sdk._logs import LoggerProvider, _private\n"
        "import opentelemetry.sdk._logs._internal.export\n"
    )
    assert private_imports(source, "example.py") == [
        "1: a._b",
        "2: a._b",
        "2: a._b.c",
        "3: a._b",
        "8: opentelemetry.sdk._logs._private",
        "9: opentelemetry.sdk._logs._internal.export",
    ]


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_package_imports_a_private_name_of_a_dependency(package: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in sorted(PACKAGES[package].rglob("*.py"))
        for hit in private_imports(path.read_text(), str(path))
    ]
    assert not found, found
