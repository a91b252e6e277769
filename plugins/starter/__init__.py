"""``aviso-server plugin new``: the plugin starter kit, added through the ``aviso_commands``
hook (the package it writes is :mod:`aviso_builtins.starter.package`'s)."""

from __future__ import annotations

import click

from aviso_builtins.starter.package import KINDS
from aviso_plugins import hookimpl

__all__ = ["aviso_commands"]


@click.group("plugin")
def plugin_tools() -> None:
    """Tools for plugin authors."""


@plugin_tools.command("new")
@click.argument("name")
@click.option(
    "--kind",
    required=True,
    type=click.Choice(list(KINDS)),
    help="What the plugin provides.",
)
@click.option(
    "--directory",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Where to create the package folder NAME.",
)
def new_plugin(name: str, kind: str, directory: str) -> None:
    """Write a plugin package NAME (a distribution name such as aviso-colour): pyproject.toml
    with the entry point, the plugin, tests using the testing kit, and a README.

    It installs and passes its tests as written: `pip install -e 'NAME[test]'` and
    `python -m pytest` in NAME."""
    from pathlib import Path

    from aviso_builtins.starter.package import StarterError, create_package
    from aviso_host.embedding import discover

    try:
        target = create_package(name, kind, Path(directory), discover(tolerant=True))
    except StarterError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"created {target}")


@hookimpl
def aviso_commands() -> list[click.Command]:
    return [plugin_tools]
