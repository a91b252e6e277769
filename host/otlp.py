"""Log records exported over OTLP (``logging.otlp``).

Export never slows a request down: the handler only formats the record as the JSON log
does and appends it to a bounded queue (``MAX_QUEUE_SIZE``); one background thread builds the
OTLP requests and does the network I/O. When the collector is down or hangs the queue fills
and the oldest records are dropped; those are counted as suppressed, failed exports as export
failures (``aviso_otlp_*`` metrics).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass

from prometheus_client import Counter

from aviso_host.config.settings import OtlpSettings
from aviso_host.logs import JsonLineFormatter, log_event

MAX_QUEUE_SIZE = 2048
"""Records waiting for export; beyond it the oldest are dropped (and counted)."""
MAX_EXPORT_BATCH = 512
"""Records in one export request (``OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`` changes it)."""
SCHEDULE_DELAY_MILLIS = 1000
"""How long records wait for a batch to fill (``OTEL_BLRP_SCHEDULE_DELAY`` changes it)."""
EXPORT_TIMEOUT_SECONDS = 5.0
"""How long one export, retries included, may wait for the collector before it counts as
failed."""
SHUTDOWN_WAIT_SECONDS = 2.0
"""How long exiting waits for the last records to leave: never blocked by a dead collector."""

EXPORT_THREAD_NAME = "aviso-otlp-export"
# The export thread logs too (its own failures; httpx's request lines): exporting those
# records would feed the queue from the exporter itself. grpc logs from threads of its own.
_OWN_LOGGERS = ("grpc",)
# httpx logs every request at info: one line per export batch is noise in the JSON log.
_HTTP_CLIENT_LOGGER = "httpx"


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


@dataclass(frozen=True, slots=True)
class QueuedRecord:
    """One log record as the JSON log wrote it (masked and capped), waiting for export."""

    line: str
    time_unix_nano: int
    observed_time_unix_nano: int
    levelno: int
    levelname: str


class RecordQueue:
    """The bounded queue between the logging threads and the export thread."""

    def __init__(self, batch_size: int) -> None:
        self._records: deque[QueuedRecord] = deque(maxlen=MAX_QUEUE_SIZE)
        self._batch_size = batch_size
        self._changed = threading.Condition()
        self.closing = False

    def put(self, record: QueuedRecord) -> None:
        """Append ``record``; a full queue drops its oldest one."""
        with self._changed:
            full = len(self._records) == MAX_QUEUE_SIZE
            self._records.append(record)
            if len(self._records) >= self._batch_size:
                self._changed.notify()
        if full:
            TALLIES.suppressed()

    def next_batch(self, delay: float) -> list[QueuedRecord]:
        """Up to one batch, once a batch is full, ``delay`` has passed or the queue closes
        (then empty once nothing is left)."""
        with self._changed:
            self._changed.wait_for(
                lambda: self.closing or len(self._records) >= self._batch_size, delay
            )
            count = min(self._batch_size, len(self._records))
            return [self._records.popleft() for _ in range(count)]

    def close(self) -> None:
        with self._changed:
            self.closing = True
            self._changed.notify()


class OtlpHandler(logging.Handler):
    """Queues each standard-library record as the JSON log writes it (secrets masked, text
    capped): the exported body is the line's message, the attributes its other members
    (``logger``, request id, audit fields and the event's own fields)."""

    def __init__(self, queue: RecordQueue) -> None:
        super().__init__()
        self._queue = queue
        self.setFormatter(JsonLineFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith(_OWN_LOGGERS) or not _not_from_export_thread(record):
            return
        try:
            self._queue.put(
                QueuedRecord(
                    line=self.format(record),
                    time_unix_nano=int(record.created * 1e9),
                    observed_time_unix_nano=time.time_ns(),
                    levelno=record.levelno,
                    levelname=record.levelname,
                )
            )
        except Exception:
            self.handleError(record)


class OtlpLogExport:
    """The running export: a handler on the root logger and the export thread behind it."""

    def __init__(self, settings: OtlpSettings, version: str) -> None:
        from aviso_host.otlp_wire import Exporter

        batch_size = _env_int("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", MAX_EXPORT_BATCH)
        self._queue = RecordQueue(min(batch_size, MAX_QUEUE_SIZE))
        self._delay = _env_int("OTEL_BLRP_SCHEDULE_DELAY", SCHEDULE_DELAY_MILLIS) / 1000
        self._stopping = threading.Event()
        self._exporter = Exporter(
            settings.endpoint, settings.protocol, version, EXPORT_TIMEOUT_SECONDS, self._stopping
        )
        self._failing = False
        self.handler = OtlpHandler(self._queue)
        logging.getLogger(_HTTP_CLIENT_LOGGER).addFilter(_not_from_export_thread)
        # A daemon: a collector that hangs never holds the process past SHUTDOWN_WAIT_SECONDS.
        self._thread = threading.Thread(target=self._run, name=EXPORT_THREAD_NAME, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Flush what leaves within ``SHUTDOWN_WAIT_SECONDS``; never wait longer."""
        logging.getLogger().removeHandler(self.handler)
        self._stopping.set()
        self._queue.close()
        self._thread.join(SHUTDOWN_WAIT_SECONDS)
        logging.getLogger(_HTTP_CLIENT_LOGGER).removeFilter(_not_from_export_thread)

    def _run(self) -> None:
        try:
            while True:
                batch = self._queue.next_batch(self._delay)
                if batch:
                    self._export(batch)
                elif self._queue.closing:
                    return
        finally:
            self._exporter.close()

    def _export(self, batch: list[QueuedRecord]) -> None:
        failure = self._exporter.export(batch)
        if failure is None:
            self._failing = False
            return
        TALLIES.failed()
        if not self._failing:  # once per failing streak: the counter tells the rest
            self._failing = True
            log_event(
                "otlp.export.failed",
                f"OTLP log export failed ({failure}); a batch that fails is dropped, "
                "aviso_otlp_export_failures_total counts them",
                logging.WARNING,
                reason=failure,
            )


def _not_from_export_thread(record: logging.LogRecord) -> bool:
    """A logging filter: filters run in the thread that logs."""
    return threading.current_thread().name != EXPORT_THREAD_NAME


def _env_int(name: str, default: int) -> int:
    """A positive whole number from the environment; anything else leaves ``default``."""
    text = os.environ.get(name, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else default


def start_otlp_export(settings: OtlpSettings, version: str) -> OtlpLogExport | None:
    """Export every log record the root logger handles from now on (``None``: disabled)."""
    if not settings.enabled:
        return None
    export = OtlpLogExport(settings, version)
    logging.getLogger().addHandler(export.handler)
    return export
