"""The ``aviso-server`` command (ECMWF's client pyaviso owns ``aviso``)."""

from __future__ import annotations

import logging
import os
import sys

import click
import yaml

from aviso_host.logs import configure_logging, log_event
from aviso_host.plugins import PluginError, discover
from aviso_spark.cli import spark

CONFIG_ENV = "AVISOSERVER_CONFIG_FILE"


@click.group()
def main() -> None:
    """aviso-server: notifications for data-driven workflows (notify, watch, replay)."""


@main.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Configuration file (only this file is read).",
)
@click.option("--host", help="Bind address (default: application.host).")
@click.option("--port", type=int, help="Port (default: application.port).")
@click.option(
    "--embedded-nats",
    "embedded_nats",
    type=click.Path(file_okay=False),
    help="Durable history with no other setup: store notifications in JetStream, run by a "
    "private nats-server child process keeping its files in this directory.",
)
def serve(
    config_file: str | None, host: str | None, port: int | None, embedded_nats: str | None
) -> None:
    """Run the server with uvicorn."""
    from aviso_host.app import create_app
    from aviso_host.config import ConfigError, load_settings
    from aviso_host.server import AvisoServer, uvicorn_config

    if config_file is not None:
        os.environ[CONFIG_ENV] = config_file
    if embedded_nats is not None:
        # Expressed as configuration overrides: the host knows config keys, not backends.
        os.environ["AVISOSERVER_NOTIFICATION_BACKEND__KIND"] = "jetstream"
        os.environ["AVISOSERVER_NOTIFICATION_BACKEND__JETSTREAM__EMBEDDED_STORE_DIR"] = str(
            os.path.abspath(embedded_nats)
        )
    try:
        registry = discover()
        settings = load_settings(registry)
    except (ConfigError, PluginError) as exc:
        raise click.ClickException(str(exc)) from exc
    configure_logging(settings.logging.level)
    for warning in settings.warnings:
        log_event("config.warning", warning, logging.WARNING)
    try:
        app = create_app(settings, registry)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    config = uvicorn_config(
        app,
        host or settings.application.host,
        port if port is not None else settings.application.port,
    )
    server = AvisoServer(config, app.state.service)
    server.run()
    if not server.started:
        sys.exit(1)


@main.command("plugins")
def list_plugins() -> None:
    """List the discovered plugins: name, kind, distribution, version."""
    try:
        registry = discover()
    except PluginError as exc:
        raise click.ClickException(str(exc)) from exc
    rows = [("NAME", "KIND", "DISTRIBUTION", "VERSION")]
    rows += [
        (p.name, ",".join(p.kinds) or "-", p.distribution, p.version) for p in registry.plugins
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


@main.group()
def config() -> None:
    """Configuration tools."""


@config.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def check(path: str) -> None:
    """Validate PATH (plus AVISOSERVER_* overrides) and print the effective configuration.

    Every plugin is constructed exactly as ``serve`` constructs it (nothing is started), so
    a configuration this accepts is one ``serve`` can build."""
    from aviso_host.app import create_app
    from aviso_host.config import ConfigError, load_settings, redact

    try:
        registry = discover()
        settings = load_settings(registry, environ={**os.environ, CONFIG_ENV: path})
        # As serve: what plugins log while being constructed is a masked JSON line.
        configure_logging(settings.logging.level)
        create_app(settings, registry)
    except (ConfigError, PluginError) as exc:
        raise click.ClickException(str(exc)) from exc
    # Accepted, but worth acting on (e.g. what aviso-server 0.13 would refuse); on stderr
    # so that stdout stays the effective configuration.
    for warning in settings.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(
        yaml.safe_dump(
            redact(settings.document, settings.secret_paths, settings.plugin_sections),
            sort_keys=False,
            allow_unicode=True,
        ),
        nl=False,
    )


@main.group()
def load() -> None:
    """Load tests with locust, from a source checkout (pip install -e '.[load]')."""


@load.command(
    "run",
    add_help_option=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def load_run(args: tuple[str, ...]) -> None:
    """Run a load scenario: aviso-server load run SCENARIO [--backend B] [--users N]
    [--duration S]."""
    try:
        from aviso_loadtests.cli import run
    except ImportError as exc:  # the package or the 'load' extra is not installed
        raise click.ClickException(
            f"load tests unavailable ({exc}); pip install -e '.[load]'"
        ) from exc
    run.main(list(args), prog_name="aviso-server load run")


main.add_command(spark)  # imports pyspark only when a spark command runs
