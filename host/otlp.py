"""Log records exported over OTLP (``logging.otlp``), through the OpenTelemetry SDK.

Export never slows a request down: records go to the SDK's batch processor, whose worker
thread does the network I/O, and its queue is bounded (``MAX_QUEUE_SIZE``). When the
collector is down or hangs the queue fills and the oldest records are dropped; those are
counted as suppressed, failed exports as export failures (``aviso_otlp_*`` metrics).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client import Counter

from aviso_host.config.settings import OtlpSettings
from aviso_host.logs import audit_fields, exported_record, request_id_var

MAX_QUEUE_SIZE = 2048
"""Records waiting for export; beyond it the oldest are dropped (and counted)."""
EXPORT_TIMEOUT_SECONDS = 5.0
"""How long one export may wait for the collector before it counts as failed."""
SHUTDOWN_WAIT_SECONDS = 2.0
"""How long exiting waits for the last records to leave: never blocked by a dead collector."""

# The batch worker thread logs through the standard library too (the SDK's own warnings,
# urllib3, grpc); exporting those records would feed the queue from the exporter itself.
_EXPORT_THREAD_PREFIX = "OtelBatch"
_OWN_LOGGERS = ("opentelemetry", "urllib3", "grpc")

_SEVERITIES = {
    logging.DEBUG: SeverityNumber.DEBUG,
    logging.INFO: SeverityNumber.INFO,
    logging.WARNING: SeverityNumber.WARN,
    logging.ERROR: SeverityNumber.ERROR,
    logging.CRITICAL: SeverityNumber.FATAL,
}
_SEVERITY_TEXT = {logging.WARNING: "WARN"}


class ExportTallies:
    """The process's OTLP counters (logging is process-wide, so are they).

    They belong to no registry: each service's registry adds them. Under ``serve --workers``
    prometheus-client keeps them in its multiprocess files, so the supervisor sums them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued = 0
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

    def admit(self, capacity: int) -> None:
        """A record enters the queue; at capacity the queue drops its oldest one."""
        with self._lock:
            full = self._queued >= capacity
            if not full:
                self._queued += 1
        if full:
            self.suppressed_records.inc()

    def taken(self, count: int) -> None:
        """``count`` records left the queue for an export."""
        with self._lock:
            self._queued = max(0, self._queued - count)

    def failed(self) -> None:
        self.export_failures.inc()


TALLIES = ExportTallies()


class _CountingExporter(LogRecordExporter):
    """The SDK exporter, with its outcomes counted."""

    def __init__(self, exporter: LogRecordExporter) -> None:
        self._exporter = exporter

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        TALLIES.taken(len(batch))
        try:
            result = self._exporter.export(batch)
        except Exception:  # a broken exporter must not kill the worker thread
            result = LogRecordExportResult.FAILURE
        if result is not LogRecordExportResult.SUCCESS:
            TALLIES.failed()
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._exporter.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._exporter.shutdown()


class OtlpHandler(logging.Handler):
    """Turns standard-library log records into OTLP log records (body = message; request id,
    audit fields and the event's own fields as attributes)."""

    def __init__(self, provider: LoggerProvider) -> None:
        super().__init__()
        self._logger = provider.get_logger("aviso")

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(_OWN_LOGGERS) or threading.current_thread().name.startswith(
            _EXPORT_THREAD_PREFIX
        ):
            return
        record = exported_record(record)  # the JSON log's secret masking and length cap
        try:
            TALLIES.admit(MAX_QUEUE_SIZE)
            self._logger.emit(
                LogRecord(
                    timestamp=int(record.created * 1e9),
                    severity_number=_SEVERITIES.get(record.levelno, SeverityNumber.INFO),
                    severity_text=_SEVERITY_TEXT.get(record.levelno, record.levelname),
                    body=record.getMessage(),
                    attributes=_attributes(record),
                )
            )
        except Exception:
            self.handleError(record)


def _attributes(record: logging.LogRecord) -> dict[str, Any]:
    attributes: dict[str, Any] = {"logger": record.name}
    request_id = getattr(record, "request_id", None) or request_id_var.get()
    if request_id:
        attributes["request_id"] = request_id
        attributes.update(audit_fields())
    for key, value in getattr(record, "fields", {}).items():
        if value is not None:
            attributes[key] = value if isinstance(value, str | bool | int | float) else str(value)
    return attributes


class OtlpLogExport:
    """The running export: a handler on the root logger and the SDK pipeline behind it."""

    def __init__(self, settings: OtlpSettings, version: str) -> None:
        self._provider = LoggerProvider(
            resource=Resource.create({"service.name": "aviso-server", "service.version": version}),
            # The SDK's own exit hook would wait up to 30 s for a hanging collector.
            shutdown_on_exit=False,
        )
        self._provider.add_log_record_processor(
            BatchLogRecordProcessor(
                _CountingExporter(_exporter(settings)), max_queue_size=MAX_QUEUE_SIZE
            )
        )
        self.handler = OtlpHandler(self._provider)

    def close(self) -> None:
        """Flush what leaves within ``SHUTDOWN_WAIT_SECONDS``; never wait longer."""
        logging.getLogger().removeHandler(self.handler)
        closing = threading.Thread(target=self._provider.shutdown, daemon=True)
        closing.start()
        closing.join(SHUTDOWN_WAIT_SECONDS)


def _exporter(settings: OtlpSettings) -> LogRecordExporter:
    if settings.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        return OTLPLogExporter(endpoint=settings.endpoint, timeout=EXPORT_TIMEOUT_SECONDS)
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
        OTLPLogExporter as GrpcLogExporter,
    )

    return GrpcLogExporter(
        endpoint=settings.endpoint,
        insecure=settings.endpoint.startswith("http://"),
        timeout=EXPORT_TIMEOUT_SECONDS,
    )


def start_otlp_export(settings: OtlpSettings, version: str) -> OtlpLogExport | None:
    """Export every log record the root logger handles from now on (``None``: disabled)."""
    if not settings.enabled:
        return None
    export = OtlpLogExport(settings, version)
    logging.getLogger().addHandler(export.handler)
    return export
