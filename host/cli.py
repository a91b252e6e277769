"""The ``aviso-server`` command (ECMWF's client pyaviso owns ``aviso``)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import click
import yaml

from aviso_host.logs import configure_logging, log_event
from aviso_host.plugins import PluginError, discover

CONFIG_ENV = "AVISOSERVER_CONFIG_FILE"


class _AvisoCommands(click.Group):
    """The host's own commands, plus those plugins add through the ``aviso_commands`` hook.

    Plugins are discovered only when a name is not one of the host's (or for ``--help``), so
    ``serve`` discovers them once, itself. A plugin that fails to load is reported when its
    command (or any unknown one) is asked for; the host's commands keep working.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plugins_added = False
        self._plugin_error: PluginError | None = None

    def _add_plugin_commands(self) -> None:
        if self._plugins_added:
            return
        self._plugins_added = True
        try:
            registry = discover()
        except PluginError as exc:
            self._plugin_error = exc
            return
        for name, command in registry.commands.items():
            self.add_command(command, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_plugin_commands()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._add_plugin_commands()
        command = super().get_command(ctx, cmd_name)
        if command is None and self._plugin_error is not None:
            raise click.ClickException(str(self._plugin_error))
        return command


@click.group(cls=_AvisoCommands)
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
@click.option(
    "--workers",
    help="Worker processes sharing the port, or 'auto' (one per usable core); needs a "
    "backend shared between processes (jetstream). Default: application.workers (1).",
)
def serve(
    config_file: str | None,
    host: str | None,
    port: int | None,
    embedded_nats: str | None,
    workers: str | None,
) -> None:
    """Run the server with uvicorn."""
    from aviso_host.app import create_app
    from aviso_host.config import ConfigError, load_settings
    from aviso_host.supervisor import (
        Supervisor,
        lost_in_process,
        refuse_process_local_backend,
        service_extensions,
        start_extensions,
        stop_extensions,
        worker_count,
    )
    from aviso_host.worker import Stopped, otlp_export, run_server, stop_on_signals

    if config_file is not None:
        os.environ[CONFIG_ENV] = config_file
    # Expressed as configuration overrides: the host knows config keys, not backends.
    if embedded_nats is not None:
        os.environ["AVISOSERVER_NOTIFICATION_BACKEND__KIND"] = "jetstream"
        os.environ["AVISOSERVER_NOTIFICATION_BACKEND__JETSTREAM__EMBEDDED_STORE_DIR"] = str(
            os.path.abspath(embedded_nats)
        )
    if workers is not None:
        os.environ["AVISOSERVER_APPLICATION__WORKERS"] = workers
    try:
        registry = discover()
        settings = load_settings(registry)
        count = worker_count(settings.application.workers)
        refuse_process_local_backend(settings, registry, count)
        extensions = service_extensions(settings, registry)
    except (ConfigError, PluginError) as exc:
        raise click.ClickException(str(exc)) from exc
    configure_logging(settings.logging.level)
    with otlp_export(settings):
        for warning in settings.warnings:
            log_event("config.warning", warning, logging.WARNING)
        address = (
            host or settings.application.host,
            port if port is not None else settings.application.port,
        )
        if count > 1:
            try:  # as `config check`: a configuration the workers cannot build fails here, once
                create_app(settings, registry)
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from exc
            supervisor = Supervisor(*address, count, extensions)
            try:
                status = supervisor.run()
            except Exception as exc:  # an extension could not start: one line, as any refusal
                raise click.ClickException(str(exc) or type(exc).__name__) from exc
            if supervisor.failure is not None:
                raise click.ClickException(supervisor.failure)
            sys.exit(status)
        lost: list[str] = []
        stopped_by: int | None = None
        served = False
        try:
            with stop_on_signals():
                try:
                    started, environment = start_extensions(extensions, lost_in_process(lost))
                except Exception as exc:  # a shared resource could not start: one line
                    raise click.ClickException(str(exc) or type(exc).__name__) from exc
                try:
                    if environment:
                        # The backend connects to what was started as to any server.
                        os.environ.update(environment)
                        settings = load_settings(registry)
                    served = run_server(settings, registry, *address)
                except ConfigError as exc:
                    raise click.ClickException(str(exc)) from exc
                finally:
                    stop_extensions(started)
        except Stopped as exc:
            stopped_by = exc.signum
    if lost:
        raise click.ClickException(lost[0])
    if stopped_by is not None:
        signal.raise_signal(stopped_by)  # ended by the signal, as uvicorn would have it
    if not served:
        sys.exit(1)


@main.command("plugins")
def list_plugins() -> None:
    """List the discovered plugins: name, distribution, version and what each provides
    (handler types, backend kinds, auth modes, authorisers, sinks, commands, routes)."""
    try:
        registry = discover()
    except PluginError as exc:
        raise click.ClickException(str(exc)) from exc
    rows = [("NAME", "DISTRIBUTION", "VERSION", "PROVIDES")]
    rows += [
        (
            p.name,
            p.distribution,
            p.version or "-",
            "; ".join(
                f"{kind}: {', '.join(names)}" if names else kind for kind, names in p.provides
            )
            or "-",
        )
        for p in registry.plugins
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
