"""The ``aviso_server`` pytest fixture, registered by installing aviso-py (a ``pytest11``
entry point), so a plugin's test suite needs no conftest::

    def test_my_plugin(aviso_server) -> None:
        aviso = aviso_server(CONFIG, plugins=[my_plugin])
        assert aviso.notify("paint", {"colour": "#ABC"}).status_code == 200

``aviso_server(config, plugins=(), installed=False)`` takes the arguments of
:func:`aviso_plugins.testing.serve` and returns its client; every server a test started is
stopped after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from aviso_plugins.testing import AvisoClient

__all__ = ["aviso_server"]


@pytest.fixture
def aviso_server() -> Iterator[Callable[..., AvisoClient]]:
    # Imported here: pytest loads this module in every run where aviso-py is installed.
    from aviso_plugins.testing import serve

    with ExitStack() as servers:

        def start(*args: object, **kwargs: object) -> AvisoClient:
            return servers.enter_context(serve(*args, **kwargs))  # type: ignore[arg-type]

        yield start
