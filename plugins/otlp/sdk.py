"""The OTLP log export on the OpenTelemetry SDK (the ``otlp`` extra): its logs API, its batch
processor and its OTLP exporters (gRPC, or protobuf over HTTP).

The SDK's logs API is marked experimental by its module name (``opentelemetry._logs``,
``opentelemetry.sdk._logs``); it is documented, and ``tests/test_private_imports.py`` lists
the pages. What aviso adds around it:

- the record is the JSON log line (secrets masked, text capped): body = its message,
  attributes = its other members;
- a bound on the records waiting for export, in front of the SDK's queue, whose overflow is
  counted (the SDK's own drop counter is an opt-in OpenTelemetry metric, not a Prometheus one);
- failed exports counted, and reported once per failing streak;
- closing flushes what leaves within ``SHUTDOWN_WAIT_SECONDS`` and never waits longer (the
  SDK's processor waits up to 30 s for a collector that hangs).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
    OTLPLogExporter as GrpcLogExporter,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import (
    OTLPLogExporter as HttpLogExporter,
)
from opentelemetry.sdk._logs import (
    LoggerProvider,
    LogRecordProcessor,
    ReadableLogRecord,
    ReadWriteLogRecord,
)
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from aviso_builtins.otlp.export import OtlpSettings

SCOPE_NAME = "aviso"
EXPORT_TIMEOUT_SECONDS = 5.0
"""How long one export, retries included, may wait for the collector before it counts as
failed."""
SHUTDOWN_WAIT_SECONDS = 2.0
"""How long exiting waits for the last records to leave: never blocked by a dead collector."""

# The SDK, grpc and the HTTP client log about the export itself: exporting those records
# would feed the export from the exporter.
_OWN_LOGGERS = ("opentelemetry", "grpc")
_SEVERITIES = {
    logging.DEBUG: SeverityNumber.DEBUG,
    logging.INFO: SeverityNumber.INFO,
    logging.WARNING: SeverityNumber.WARN,
    logging.ERROR: SeverityNumber.ERROR,
    logging.CRITICAL: SeverityNumber.FATAL,
}
_SEVERITY_TEXT = {logging.WARNING: "WARN"}
# Members of the JSON line that are not attributes: the record has fields of its own for the
# time, level and message, and a traceback stays in the JSON log.
_NOT_ATTRIBUTES = frozenset({"timestamp", "level", "message", "exception"})
_INT64 = range(-(2**63), 2**63)
# The SDK's queue never holds more than the bound on waiting records: its own size only has to
# admit the batch size OTEL_BLRP_MAX_EXPORT_BATCH_SIZE asks for (the SDK refuses a batch
# larger than its queue).
_SDK_QUEUE_SIZE = 1 << 16
_UNKNOWN_REASON = "no reason given: see the opentelemetry log lines before this one"
# An attribute that is no scalar is the JSON text the log line holds (compact, as written).
_JSON_TEXT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# The host writes a record of this logger with ``fields`` as a named event's JSON line.
_EVENTS = logging.getLogger("aviso")


class Tallies(Protocol):
    """What the export counts (the process's Prometheus counters, owned by the caller)."""

    def suppressed(self) -> None:
        """One record dropped because the export queue was full."""

    def failed(self) -> None:
        """One export that did not reach the collector."""


class _Exporting(threading.local):
    """Set on the thread that runs an export, while it runs."""

    active = False
    reason = ""


_EXPORTING = _Exporting()


class _ExportDiagnostics(logging.Handler):
    """Keeps the last problem the SDK logged during an export on this thread: the reason an
    export failed (the exporter returns only failure). The records still reach the JSON log
    as any library's (the SDK throttles its repeats)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if _EXPORTING.active:
            _EXPORTING.reason = record.getMessage()


class Waiting:
    """The records handed to the SDK's processor and not yet taken by an export, at most
    ``limit``. The SDK takes a batch off its queue just before the export counts it, so its
    queue never holds more than this bound and never drops a record itself."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._count = 0
        self._lock = threading.Lock()

    def admit(self) -> bool:
        """One more record, unless ``limit`` are waiting."""
        with self._lock:
            if self._count >= self._limit:
                return False
            self._count += 1
            return True

    def taken(self, count: int) -> None:
        with self._lock:
            self._count = max(self._count - count, 0)


class WatchedExporter(LogRecordExporter):
    """The SDK's OTLP exporter, counted: each batch it takes, each failed export (reported
    once per failing streak)."""

    def __init__(self, exporter: LogRecordExporter, waiting: Waiting, tallies: Tallies) -> None:
        self._exporter = exporter
        self._waiting = waiting
        self._tallies = tallies
        self._failing = False
        self._shut = threading.Lock()
        self._stopped = False

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self._waiting.taken(len(batch))
        # While set, what this thread logs (the SDK, grpc, the report below) is not exported.
        _EXPORTING.active, _EXPORTING.reason = True, ""
        try:
            try:
                result = self._exporter.export(batch)
            except Exception as exc:  # a record that cannot be encoded must not stop the worker
                result, _EXPORTING.reason = LogRecordExportResult.FAILURE, type(exc).__name__
            self._count(result)
        finally:
            _EXPORTING.active = False
        return result

    def _count(self, result: LogRecordExportResult) -> None:
        if result is LogRecordExportResult.SUCCESS:
            self._failing = False
            return
        self._tallies.failed()
        if not self._failing:  # once per failing streak: the counter tells the rest
            self._failing = True
            reason = _EXPORTING.reason or _UNKNOWN_REASON
            _EVENTS.warning(
                "OTLP log export failed (%s); a batch that fails is dropped, "
                "aviso_otlp_export_failures_total counts them",
                reason,
                extra={"fields": {"event_name": "otlp.export.failed", "reason": reason}},
            )

    def shutdown(self) -> None:
        """Stops the exporter, once (the SDK's warns when stopped twice): a retry waiting
        for the collector gives up."""
        with self._shut:
            if self._stopped:
                return
            self._stopped = True
        self._exporter.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)


class BoundedProcessor(LogRecordProcessor):
    """The SDK's batch processor behind the bound on ``waiting`` records: beyond it a record
    is dropped here, and counted, before the SDK's queue would drop one uncounted."""

    def __init__(self, exporter: WatchedExporter, waiting: Waiting, tallies: Tallies) -> None:
        self._batches = BatchLogRecordProcessor(exporter, max_queue_size=_SDK_QUEUE_SIZE)
        self._waiting = waiting
        self._tallies = tallies

    def on_emit(self, log_record: ReadWriteLogRecord) -> None:
        if self._waiting.admit():
            self._batches.on_emit(log_record)
        else:
            self._tallies.suppressed()

    def shutdown(self) -> None:
        self._batches.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._batches.force_flush(timeout_millis)


class OtlpHandler(logging.Handler):
    """Emits each standard-library record as the JSON log writes it (``json_formatter``:
    the host's, secrets masked, text capped): the body is the line's message, the attributes
    its other members (``logger``, request id, audit fields and the event's own fields).
    Closing it stops ``on_close`` (the export behind it)."""

    def __init__(
        self,
        logger: Logger,
        json_formatter: logging.Formatter,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._logger = logger
        self._on_close = on_close
        self.setFormatter(json_formatter)

    def close(self) -> None:
        super().close()
        if self._on_close is not None:
            self._on_close()

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(_OWN_LOGGERS) or _EXPORTING.active:
            return
        try:
            entry = orjson.loads(self.format(record))
            self._logger.emit(
                timestamp=int(record.created * 1e9),
                observed_timestamp=time.time_ns(),
                severity_number=_SEVERITIES.get(record.levelno, SeverityNumber.INFO),
                severity_text=_SEVERITY_TEXT.get(record.levelno, record.levelname),
                body=entry.get("message", ""),
                attributes=_attributes(entry),
            )
        except Exception:
            self.handleError(record)


def _attributes(entry: Mapping[str, Any]) -> dict[str, AttributeValue]:
    return {
        key: _attribute(value)
        for key, value in entry.items()
        if key not in _NOT_ATTRIBUTES and value is not None
    }


def _attribute(value: Any) -> AttributeValue:
    """Scalars as they are; anything else (lists, objects, integers beyond 64 bits) as JSON
    text, as the JSON log wrote it."""
    if isinstance(value, str | bool | float) or (isinstance(value, int) and value in _INT64):
        scalar: AttributeValue = value
        return scalar
    return _JSON_TEXT.encode(value)


def exporter_for(settings: OtlpSettings) -> LogRecordExporter:
    """``OTEL_EXPORTER_OTLP_*`` (headers, certificates, compression) are the SDK's to read."""
    if settings.protocol == "http":
        return HttpLogExporter(endpoint=settings.endpoint, timeout=EXPORT_TIMEOUT_SECONDS)
    # An http:// endpoint means plaintext gRPC, https:// TLS with the system's roots.
    return GrpcLogExporter(endpoint=settings.endpoint, timeout=EXPORT_TIMEOUT_SECONDS)


class OtlpLogExport:
    """The running export: a handler on the root logger and the SDK's pipeline behind it."""

    def __init__(
        self,
        settings: OtlpSettings,
        version: str,
        tallies: Tallies,
        queue_limit: int,
        json_formatter: logging.Formatter,
        exporter: LogRecordExporter | None = None,
    ) -> None:
        waiting = Waiting(queue_limit)
        self._closing = threading.Lock()
        self._closed = False
        self._exporter = WatchedExporter(exporter or exporter_for(settings), waiting, tallies)
        # OTEL_RESOURCE_ATTRIBUTES first, the service's own name and version over them.
        resource = Resource.create({"service.name": "aviso-server", "service.version": version})
        self._provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self._provider.add_log_record_processor(BoundedProcessor(self._exporter, waiting, tallies))
        self._diagnostics = _ExportDiagnostics()
        logging.getLogger(_OWN_LOGGERS[0]).addHandler(self._diagnostics)
        self.handler = OtlpHandler(
            self._provider.get_logger(SCOPE_NAME, version), json_formatter, self.close
        )

    def close(self) -> None:
        """Flush what leaves within ``SHUTDOWN_WAIT_SECONDS``; never wait longer. Once: the
        handler's ``close`` calls it, and so does ``logging.shutdown`` at exit."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        logging.getLogger().removeHandler(self.handler)
        # The SDK's shutdown exports what is queued, then waits for its worker; a daemon
        # thread runs it so that a collector that hangs holds nothing past the wait.
        stopping = threading.Thread(
            target=self._provider.shutdown, name="aviso-otlp-shutdown", daemon=True
        )
        stopping.start()
        stopping.join(SHUTDOWN_WAIT_SECONDS)
        self._exporter.shutdown()  # a retry still waiting gives up
        logging.getLogger(_OWN_LOGGERS[0]).removeHandler(self._diagnostics)
