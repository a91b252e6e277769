"""Log records exported over OTLP (``logging.otlp``), by the OpenTelemetry SDK: the ``otlp``
extra (``pip install 'aviso-py[otlp]'``) installs it, with grpcio.

Export never slows a request down: the handler formats the record as the JSON log does and
hands it to the SDK's batch processor, whose background thread builds the OTLP requests and
does the network I/O. At most ``MAX_QUEUE_SIZE`` records wait; when the collector is down or
hangs, the records beyond are dropped and counted as suppressed, failed exports as export
failures (``aviso_otlp_*`` metrics). Discovering plugins imports only this module, which imports
nothing heavy: the section and the counters are in :mod:`aviso_builtins.otlp.export`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aviso_plugins import hookimpl

if TYPE_CHECKING:
    from prometheus_client import Counter

    from aviso_plugins.process import LogSetup, SettingsSection

__all__ = ["aviso_log_handlers", "aviso_metrics", "aviso_settings_sections"]


@hookimpl
def aviso_settings_sections() -> list[SettingsSection]:
    from aviso_builtins.otlp.export import SECTION

    return [SECTION]


@hookimpl
def aviso_log_handlers(setup: LogSetup) -> list[logging.Handler]:
    from aviso_builtins.otlp.export import otlp_settings, start_otlp_export

    export = start_otlp_export(
        otlp_settings(setup.configuration), setup.version, setup.json_formatter
    )
    return [] if export is None else [export.handler]


@hookimpl
def aviso_metrics() -> list[Counter]:
    from aviso_builtins.otlp.export import TALLIES

    return [TALLIES.export_failures, TALLIES.suppressed_records]
