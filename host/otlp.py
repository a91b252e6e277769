"""Log records exported over OTLP (``logging.otlp``), by the OpenTelemetry SDK: the ``otlp``
extra (``pip install 'aviso-py[otlp]'``) installs it, with grpcio.

Export never slows a request down: the handler formats the record as the JSON log does and
hands it to the SDK's batch processor, whose background thread builds the OTLP requests and
does the network I/O. At most ``MAX_QUEUE_SIZE`` records wait; when the collector is down or
hangs, the records beyond are dropped and counted as suppressed, failed exports as export
failures (``aviso_otlp_*`` metrics). This module only counts and starts: the SDK is imported
when export is enabled (:mod:`aviso_host.otlp_sdk`).
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Protocol

from prometheus_client import Counter

from aviso_host.config import ConfigError
from aviso_host.config.settings import OtlpSettings

MAX_QUEUE_SIZE = 2048
"""Records waiting for export; beyond it they are dropped (and counted)."""
EXTRA = "otlp"
# What the extra installs that the export imports: the SDK and its two OTLP exporters.
_EXTRA_MODULES = (
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp.proto.grpc",
    "opentelemetry.exporter.otlp.proto.http",
)


class ExportTallies:
    """The process's OTLP counters (logging is process-wide, so are they).

    They belong to no registry: each service's registry adds them. Under ``serve --workers``
    prometheus-client keeps them in its multiprocess files, so the supervisor sums them.
    """

    def __init__(self) -> None:
        self.export_failures = Counter(
            "aviso_otlp_export_failures",
            "OTLP log exports that failed (collector down, slow or refusing)",
            registry=None,
        )
        self.suppressed_records = Counter(
            "aviso_otlp_suppressed_log_records",
            "Log records dropped because the OTLP export queue was full",
            registry=None,
        )

    def suppressed(self) -> None:
        self.suppressed_records.inc()

    def failed(self) -> None:
        self.export_failures.inc()


TALLIES = ExportTallies()


class RunningExport(Protocol):
    def close(self) -> None:
        """Flush what leaves within a short wait, and stop."""


def require_otlp_sdk(settings: OtlpSettings) -> None:
    """``ConfigError`` (one line naming the extra) when export is enabled and the
    OpenTelemetry SDK is not installed."""
    if settings.enabled and not all(_installed(name) for name in _EXTRA_MODULES):
        raise ConfigError(
            f"logging.otlp.enabled needs the {EXTRA} extra, which is not installed: "
            f"pip install 'aviso-py[{EXTRA}]'"
        )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that is missing, or blocked in sys.modules
        return False


def start_otlp_export(settings: OtlpSettings, version: str) -> RunningExport | None:
    """Export every log record the root logger handles from now on (``None``: disabled)."""
    if not settings.enabled:
        return None
    require_otlp_sdk(settings)
    from aviso_host.otlp_sdk import OtlpLogExport

    export = OtlpLogExport(settings, version, TALLIES, MAX_QUEUE_SIZE)
    logging.getLogger().addHandler(export.handler)
    return export
