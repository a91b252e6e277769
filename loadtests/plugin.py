"""The ``aviso-server load`` commands, added through the ``aviso_commands`` hook.

Nothing of the load-test package is imported until ``load run`` runs: the ``load`` extra
(locust, psutil, matplotlib) may be missing wherever ``aviso-server serve`` starts.
"""

from __future__ import annotations

import click

from aviso_plugins import hookimpl


@click.group()
def load() -> None:
    """Load tests with locust (pip install 'aviso-py[load]')."""


@load.command(
    "run",
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def load_run(args: tuple[str, ...]) -> None:
    """Run a load scenario: aviso-server load run SCENARIO [--backend B] [--users N]
    [--duration S] [--output DIR]."""
    try:
        from aviso_loadtests.cli import run
    except ImportError as exc:  # the 'load' extra is not installed
        raise click.ClickException(
            f"load tests unavailable ({exc}); pip install 'aviso-py[load]'"
        ) from exc
    run.main(list(args), prog_name="aviso-server load run")


@hookimpl
def aviso_commands() -> list[click.Command]:
    return [load]
