"""``aviso_host.embedding``, the host module that Spark, the load tests and the testing kit use:
every name it offers is the host's own object, and importing it loads nothing else."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys

import pytest

from aviso_host import embedding


def type_checking_imports() -> dict[str, str]:
    """Name -> module of the imports a type checker sees (the ``if TYPE_CHECKING:`` block)."""
    tree = ast.parse(inspect.getsource(embedding))
    [block] = [node for node in tree.body if isinstance(node, ast.If)]
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def test_a_type_checker_sees_exactly_the_offered_names() -> None:
    assert sorted(type_checking_imports()) == sorted(embedding.__all__)


@pytest.mark.parametrize("name", embedding.__all__)
def test_each_name_is_at_run_time_what_a_type_checker_sees(name: str) -> None:
    home = importlib.import_module(type_checking_imports()[name])
    assert getattr(embedding, name) is getattr(home, name)
    assert name in dir(embedding)


def test_a_name_it_does_not_offer_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="create_ap"):
        embedding.create_ap  # noqa: B018


def test_importing_it_loads_no_host_module_until_a_name_is_used() -> None:
    probe = (
        "import sys\n"
        "import aviso_host.embedding\n"
        "print(sorted(m for m in sys.modules if m.startswith('aviso_host.')))\n"
        "from aviso_host.embedding import uvicorn_config\n"
        "print('aviso_host.server' in sys.modules, 'aviso_host.app' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    first, second = result.stdout.splitlines()
    assert first == "['aviso_host.embedding']"
    assert second == "True False"
