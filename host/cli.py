"""The ``aviso-server`` command (ECMWF's client pyaviso owns ``aviso``)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

# Only what `--version` needs is imported here: each command imports the rest (plugin
# discovery, configuration, logging, the app) itself, so that answering stays fast (the
# modules that must not load are listed in tests/host/test_cli_startup.py).
from aviso_host import BUILTIN_DISTRIBUTION

if TYPE_CHECKING:
    from aviso_host.plugins import PluginInfo

CONFIG_ENV = "AVISOSERVER_CONFIG_FILE"


class _AvisoCommands(click.Group):
    """The host's own commands, plus those plugins add through the ``aviso_commands`` hook.

    Plugins are discovered only when a name is not one of the host's (or for ``--help``), so
    ``serve`` discovers them once, itself. Discovery here is tolerant: the commands of the
    plugins that did load are added, and a plugin that failed is reported by ``--help`` (one
    warning line) and when its command (or any unknown one) is asked for.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plugins_added = False
        self._plugin_problems: tuple[str, ...] = ()

    def _add_plugin_commands(self) -> None:
        if self._plugins_added:
            return
        self._plugins_added = True
        from aviso_host.plugins import discover

        registry = discover(tolerant=True)
        self._plugin_problems = registry.problems
        for name, command in registry.commands.items():
            self.add_command(command, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_plugin_commands()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            self._add_plugin_commands()
        command = super().get_command(ctx, cmd_name)
        if command is None and self._plugin_problems:
            raise click.ClickException(
                f"no command '{cmd_name}'; {'; '.join(self._plugin_problems)}"
            )
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help(ctx, formatter)
        if self._plugin_problems:
            count = len(self._plugin_problems)
            click.echo(
                f"Warning: {count} plugin{'s' if count > 1 else ''} did not load, so "
                "their commands are missing (`aviso-server plugins` says why)",
                err=True,
            )


@click.group(cls=_AvisoCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=BUILTIN_DISTRIBUTION, prog_name="aviso-server")
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
    "--embedded-nats-port",
    "embedded_nats_port",
    type=click.IntRange(0, 65535),
    help="With --embedded-nats: its client port (0: any free port). Default: "
    "notification_backend.jetstream.embedded_port, else 4222 when free, else a free port; "
    "the URL is written to <directory>/nats-url while it runs.",
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
    embedded_nats_port: int | None,
    workers: str | None,
) -> None:
    """Run the server with uvicorn.

    SIGTERM or SIGINT (Ctrl-C) at any moment stops it: open streams end with
    ``server_shutdown``, requests in flight drain, and it exits 0 (with or without
    ``--workers``). It exits non-zero, with one ``Error:`` line, when it cannot start or
    loses what it depends on."""
    from aviso_host.lifecycle import Stopped, stop_on_signals

    lost: list[str] = []
    try:
        with stop_on_signals():
            _serve(config_file, host, port, embedded_nats, embedded_nats_port, workers, lost)
    except Stopped:
        # Asked to stop, before serving or once drained: the same ending as --workers
        # (uvicorn alone would re-raise the signal, click would turn SIGINT into "Aborted!").
        pass
    if lost:
        raise click.ClickException(lost[0])
    sys.exit(0)


def _serve(
    config_file: str | None,
    host: str | None,
    port: int | None,
    embedded_nats: str | None,
    embedded_nats_port: int | None,
    workers: str | None,
    lost: list[str],
) -> None:
    """``serve``, stop signals raising ``Stopped``; exits non-zero when it cannot serve, and
    notes in ``lost`` why a shared resource ended the service."""
    from aviso_host.app import create_app
    from aviso_host.config import ConfigError, load_settings
    from aviso_host.config.loader import packaged_example
    from aviso_host.lifecycle import raise_if_stopped
    from aviso_host.logs import configure_logging, log_event
    from aviso_host.plugins import PluginError, discover
    from aviso_host.supervisor import (
        Supervisor,
        lost_in_process,
        refuse_process_local_backend,
        service_extensions,
        start_extensions,
        stop_extensions,
        worker_count,
    )
    from aviso_host.worker import plugin_log_handlers, run_server

    # Nothing configures the server (e.g. installed from a wheel, run in an empty folder):
    # it serves the example shipped in the package (service.started names the files read).
    example = None if config_file else packaged_example(os.environ, Path.cwd(), Path.home())
    if config_file or example is not None:
        os.environ[CONFIG_ENV] = str(config_file or example)
    # Expressed as configuration overrides: the host knows config keys, not backends.
    if embedded_nats is not None:
        os.environ["AVISOSERVER_NOTIFICATION_BACKEND__KIND"] = "jetstream"
        os.environ["AVISOSERVER_NOTIFICATION_BACKEND__JETSTREAM__EMBEDDED_STORE_DIR"] = str(
            os.path.abspath(embedded_nats)
        )
    if embedded_nats_port is not None:
        os.environ["AVISOSERVER_NOTIFICATION_BACKEND__JETSTREAM__EMBEDDED_PORT"] = str(
            embedded_nats_port
        )
    if workers is not None:
        os.environ["AVISOSERVER_APPLICATION__WORKERS"] = workers
    try:
        registry = discover()
        settings = load_settings(registry)
        count = worker_count(settings.application.workers)
        refuse_process_local_backend(settings, registry, count)
        extensions = service_extensions(settings, registry, count)
    except (ConfigError, PluginError) as exc:
        raise click.ClickException(str(exc)) from exc
    configure_logging(settings.logging.level, settings.logging.format)
    with plugin_log_handlers(settings, registry):
        for warning in (*registry.warnings, *settings.warnings):
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
            raise_if_stopped()  # the supervisor's own stop handlers take over now
            try:
                status = supervisor.run()
            except Exception as exc:  # an extension could not start: one line, as any refusal
                raise click.ClickException(str(exc) or type(exc).__name__) from exc
            if supervisor.failure is not None:
                raise click.ClickException(supervisor.failure)
            sys.exit(status)
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
        except (ConfigError, PluginError) as exc:
            raise click.ClickException(str(exc)) from exc
        finally:
            stop_extensions(started)
    if not served and not lost:
        sys.exit(1)


@main.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per plugin, as a list.")
def list_plugins(as_json: bool) -> None:
    """List every plugin found: name, state (loaded, failed, conflicting or blocked),
    distribution, version and what each provides (handler types, backend kinds, auth modes,
    authorisers, sinks, commands, routes) or why it is not in use.

    Exits 1 when a plugin failed or conflicts (``serve`` would refuse to start)."""
    from aviso_host.plugins import discover

    registry = discover(tolerant=True)
    everything = sorted((*registry.plugins, *registry.unloaded), key=lambda p: p.name)
    if as_json:
        click.echo(json.dumps([_plugin_document(p) for p in everything], indent=2))
    else:
        rows = [("NAME", "STATE", "DISTRIBUTION", "VERSION", "PROVIDES")]
        rows += [
            (p.name, p.state, p.distribution, p.version or "-", _plugin_summary(p))
            for p in everything
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            cells = zip(row, widths, strict=True)
            click.echo("  ".join(cell.ljust(width) for cell, width in cells).rstrip())
    for warning in registry.warnings:
        click.echo(f"Warning: {warning}", err=True)
    if registry.problems:
        for problem in registry.problems:
            click.echo(f"Error: {problem}", err=True)
        sys.exit(1)


def _plugin_summary(plugin: PluginInfo) -> str:
    if plugin.reason:
        return plugin.reason
    provides = (f"{kind}: {', '.join(names)}" if names else kind for kind, names in plugin.provides)
    return "; ".join(provides) or "-"


def _plugin_document(plugin: PluginInfo) -> dict[str, Any]:
    return {
        "name": plugin.name,
        "state": plugin.state,
        "reason": plugin.reason or None,
        "distribution": plugin.distribution,
        "version": plugin.version or None,
        "provides": {kind: list(names) for kind, names in plugin.provides},
    }


@main.group()
def config() -> None:
    """Configuration tools."""


@config.command("check")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--strict",
    is_flag=True,
    help="Unknown keys and AVISOSERVER_* variables that address no key are errors.",
)
@click.option(
    "--show/--no-show",
    default=None,
    help="Print the effective configuration, secrets masked (the default with PATH).",
)
@click.option(
    "--defaults",
    is_flag=True,
    help="Show every setting with the default the server applies where none is written "
    "(implies --show).",
)
def check(path: str | None, strict: bool, show: bool | None, defaults: bool) -> None:
    """Validate PATH (plus AVISOSERVER_* overrides) and print the effective configuration.

    Without PATH, check what ``serve`` would read: AVISOSERVER_CONFIG_FILE or the default
    file cascade, and the AVISOSERVER_* overrides. Every plugin is constructed exactly as
    ``serve`` constructs it (nothing is started), so a configuration this accepts is one
    ``serve`` can build."""
    import yaml

    from aviso_host.app import create_app
    from aviso_host.config import ConfigError, load_settings, redact
    from aviso_host.config.build import with_declared_defaults
    from aviso_host.config.loader import config_files, environment_overrides, packaged_example
    from aviso_host.logs import configure_logging
    from aviso_host.plugins import PluginError, discover

    environ = dict(os.environ) if path is None else {**os.environ, CONFIG_ENV: path}
    example = packaged_example(environ, Path.cwd(), Path.home())
    if example is not None:  # what serve would read
        environ[CONFIG_ENV] = str(example)
    try:
        registry = discover()
        files = config_files(environ, Path.cwd(), Path.home())
        settings = load_settings(registry, environ=environ)
        # As serve: what plugins log while being constructed is a masked JSON line.
        configure_logging(settings.logging.level, settings.logging.format)
        create_app(settings, registry)
    except (ConfigError, PluginError) as exc:
        raise click.ClickException(str(exc)) from exc
    # Accepted, but worth acting on (e.g. what aviso-server 0.13 would refuse); on stderr
    # so that stdout stays the effective configuration.
    for warning in registry.warnings:
        click.echo(f"warning: {warning}", err=True)
    for warning in settings.warnings:
        refused = strict and warning in settings.unknown
        click.echo(f"{'Error' if refused else 'warning'}: {warning}", err=True)
    if strict and settings.unknown:
        sys.exit(1)
    if defaults or (show if show is not None else path is not None):
        document = (
            with_declared_defaults(settings.document, registry) if defaults else settings.document
        )
        click.echo(
            yaml.safe_dump(
                redact(document, settings.secret_paths, settings.plugin_sections),
                sort_keys=False,
                allow_unicode=True,
            ),
            nl=False,
        )
    else:
        variables = sorted(set(environment_overrides(environ)) - {CONFIG_ENV})
        read = [*(str(file) for file in files), *variables]
        click.echo(f"OK: {', '.join(read) or 'nothing configured'}")
