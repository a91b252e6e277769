"""The OTLP log export in process (the OpenTelemetry SDK's pipeline), against a loopback gRPC
collector (opentelemetry-proto's generated service on grpcio): records carry exactly the JSON
log line's text (secrets masked, long text capped), transient refusals are retried, permanent
ones counted once per batch, closing flushes what is queued without waiting for the batch
delay, and the records beyond the bound on waiting ones are dropped and counted.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence

import grpc  # type: ignore[import-untyped]  # grpcio ships no type hints
import pytest
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from prometheus_client import CollectorRegistry

from aviso_builtins.otlp.export import MAX_QUEUE_SIZE, TALLIES, OtlpSettings, start_otlp_export
from aviso_builtins.otlp.sdk import OtlpLogExport
from aviso_host import logs
from aviso_host.config.redact import REDACTED
from aviso_host.logs import LINE_TEXT_LIMIT, JsonLineFormatter, log_event, register_secrets
from tests.support.fake_otlp import OtlpReceiver, otlp_grpc_receiver

SECRET = "s3cret-value-for-otlp"
FAILURES = "aviso_otlp_export_failures_total"


class Lines(logging.Handler):
    """The JSON lines the stderr handler would write, kept."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonLineFormatter())
        self.lines: list[str] = []
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.lines.append(self.format(record))


@pytest.fixture
def aviso_logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[logging.Logger]:
    monkeypatch.setattr(logs, "_secrets", frozenset())  # registered secrets are process-wide
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "20")
    logger = logging.getLogger("aviso")
    level = logger.level
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(level)


def exporting(logger: logging.Logger, receiver: OtlpReceiver) -> OtlpLogExport:
    settings = OtlpSettings(enabled=True, endpoint=receiver.url)
    export = OtlpLogExport(settings, "1.2.3", TALLIES, MAX_QUEUE_SIZE, JsonLineFormatter())
    logger.addHandler(export.handler)
    return export


def answered_more(receiver: OtlpReceiver, exports: int) -> Callable[[], bool]:
    """Whether the receiver answered more than ``exports`` exports (before the record is
    logged, so the count cannot already include its export)."""
    return lambda: len(receiver.metadata) > exports


def failures() -> float:
    registry = CollectorRegistry()
    registry.register(TALLIES.export_failures)
    value = registry.get_sample_value(FAILURES)
    assert value is not None
    return value


def test_records_carry_the_json_lines_masked_and_capped_text(
    aviso_logger: logging.Logger,
) -> None:
    register_secrets([SECRET])
    lines = Lines()
    aviso_logger.addHandler(lines)
    long_message = f"token {SECRET} " + "x" * (2 * LINE_TEXT_LIMIT)
    with otlp_grpc_receiver() as receiver:
        export = exporting(aviso_logger, receiver)
        try:
            log_event("test.masked", long_message, detail=f"with {SECRET} inside", count=3)
            receiver.wait_for(lambda: bool(receiver.with_attribute("event_name", "test.masked")))
        finally:
            export.close()
            aviso_logger.removeHandler(lines)
    [exported] = receiver.with_attribute("event_name", "test.masked")
    [line] = [line for line in lines.lines if "test.masked" in line]
    entry = json.loads(line)
    assert exported.body == entry["message"]
    assert SECRET not in exported.body and REDACTED in exported.body
    assert len(exported.body) < LINE_TEXT_LIMIT + 100
    assert exported.attributes["detail"] == f"with {REDACTED} inside"
    assert exported.attributes["count"] == 3
    assert exported.attributes["logger"] == "aviso"
    assert exported.severity == "INFO"
    assert exported.resource["service.version"] == "1.2.3"


def test_a_transient_refusal_is_retried_and_not_counted(aviso_logger: logging.Logger) -> None:
    before = failures()
    with otlp_grpc_receiver(refusals=[grpc.StatusCode.UNAVAILABLE]) as receiver:
        export = exporting(aviso_logger, receiver)
        try:
            log_event("test.retried", "once refused")
            receiver.wait_for(lambda: bool(receiver.with_attribute("event_name", "test.retried")))
        finally:
            export.close()
        assert len(receiver.metadata) >= 2
    assert failures() == before


def test_a_permanent_refusal_is_counted_and_reported_once(aviso_logger: logging.Logger) -> None:
    lines = Lines()
    aviso_logger.addHandler(lines)
    before = failures()
    refusals = [grpc.StatusCode.INVALID_ARGUMENT] * 2
    with otlp_grpc_receiver(refusals=refusals) as receiver:
        export = exporting(aviso_logger, receiver)
        try:
            for name in ("test.refused.1", "test.refused.2", "test.accepted"):
                # One record per batch: each export is answered by the next status.
                log_event(name, name)
                receiver.wait_for(answered_more(receiver, len(receiver.metadata)))
            receiver.wait_for(lambda: bool(receiver.with_attribute("event_name", "test.accepted")))
        finally:
            export.close()
            aviso_logger.removeHandler(lines)
    assert failures() == before + 2
    assert not receiver.with_attribute("event_name", "test.refused.1")
    reported = [line for line in lines.lines if '"otlp.export.failed"' in line]
    assert len(reported) == 1 and "INVALID_ARGUMENT" in reported[0]


def test_closing_flushes_without_waiting_for_the_batch_delay(
    aviso_logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "3600000")
    with otlp_grpc_receiver() as receiver:
        export = exporting(aviso_logger, receiver)
        log_event("test.flushed", "queued until close")
        export.close()
        receiver.wait_for(lambda: bool(receiver.with_attribute("event_name", "test.flushed")))


class HeldExporter(LogRecordExporter):
    """A collector that holds every export until released; keeps what it was given."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.holding = threading.Event()
        self.bodies: list[str] = []

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        self.holding.set()
        self.release.wait(60)
        self.bodies.extend(str(record.log_record.body) for record in batch)
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def suppressed() -> float:
    registry = CollectorRegistry()
    registry.register(TALLIES.suppressed_records)
    value = registry.get_sample_value("aviso_otlp_suppressed_log_records_total")
    assert value is not None
    return value


def test_records_beyond_the_bound_are_dropped_and_counted(aviso_logger: logging.Logger) -> None:
    limit, beyond = 4, 3
    held = HeldExporter()
    settings = OtlpSettings(enabled=True, endpoint="http://127.0.0.1:9")
    export = OtlpLogExport(settings, "1.2.3", TALLIES, limit, JsonLineFormatter(), exporter=held)
    aviso_logger.addHandler(export.handler)
    before = suppressed()
    try:
        log_event("test.first", "first")
        assert held.holding.wait(60), "the first export never started"
        for number in range(limit + beyond):
            log_event("test.waiting", f"waiting {number}")
        assert suppressed() == before + beyond
        held.release.set()
    finally:
        export.close()
        aviso_logger.removeHandler(export.handler)
    assert held.bodies == ["first", *(f"waiting {number}" for number in range(limit))]


def test_closing_gives_up_on_a_collector_that_never_answers(
    aviso_logger: logging.Logger,
) -> None:
    """Exiting waits a bounded time for the last records, then stops the exporter: the
    export it was held in ends, and close returns (else this test would hang)."""
    held = HeldExporter()  # this test never releases it
    settings = OtlpSettings(enabled=True, endpoint="http://127.0.0.1:9")
    export = OtlpLogExport(
        settings, "1.2.3", TALLIES, MAX_QUEUE_SIZE, JsonLineFormatter(), exporter=held
    )
    aviso_logger.addHandler(export.handler)
    try:
        log_event("test.held", "held")
        assert held.holding.wait(60), "the export never started"
    finally:
        export.close()
        aviso_logger.removeHandler(export.handler)
    assert held.release.is_set(), "the exporter was not told to stop"


def test_export_disabled_starts_nothing() -> None:
    assert start_otlp_export(OtlpSettings(enabled=False), "1.2.3", JsonLineFormatter()) is None
