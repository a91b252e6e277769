"""The ``aviso-server spark`` commands, added through the ``aviso_commands`` hook.

``aviso_spark.cli`` imports pyspark only inside its commands, so every ``aviso-server`` start
(``serve`` included) can load this plugin without pyspark installed.
"""

from __future__ import annotations

import click

from aviso_plugins import hookimpl


@hookimpl
def aviso_commands() -> list[click.Command]:
    from aviso_spark.cli import spark

    return [spark]
