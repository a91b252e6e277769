"""OTLP on the wire: log records as an ``ExportLogsServiceRequest`` (opentelemetry-proto's
generated messages) and the two transports of the OTLP specification that send it, HTTP
(``application/x-protobuf`` by httpx) and gRPC (grpcio, the generated ``LogsServiceStub``).

A send retries what the specification calls transient (connection failures, HTTP 429 / 502 /
503 / 504, the retryable gRPC codes) with exponential backoff, within one deadline.

Imported only when export is enabled: loading grpcio and protobuf costs a process about a
fifth of a second.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import grpc
import httpx
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import (
    SEVERITY_NUMBER_DEBUG,
    SEVERITY_NUMBER_ERROR,
    SEVERITY_NUMBER_FATAL,
    SEVERITY_NUMBER_INFO,
    SEVERITY_NUMBER_WARN,
    LogRecord,
    ResourceLogs,
    ScopeLogs,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from aviso_host.encoding import dumps
from aviso_host.otlp import QueuedRecord

SCOPE_NAME = "aviso"
FIRST_RETRY_WAIT_SECONDS = 1.0

_SEVERITIES = {
    logging.DEBUG: SEVERITY_NUMBER_DEBUG,
    logging.INFO: SEVERITY_NUMBER_INFO,
    logging.WARNING: SEVERITY_NUMBER_WARN,
    logging.ERROR: SEVERITY_NUMBER_ERROR,
    logging.CRITICAL: SEVERITY_NUMBER_FATAL,
}
_SEVERITY_TEXT = {logging.WARNING: "WARN"}
# Members of the JSON line that are not attributes: the record has fields of its own for the
# time, level and message, and a traceback stays in the JSON log.
_NOT_ATTRIBUTES = frozenset({"timestamp", "level", "message", "exception"})
_INT64 = range(-(2**63), 2**63)

_RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
_RETRYABLE_GRPC = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def env_pairs(*names: str) -> dict[str, str]:
    """The first of these variables that is set, read as the OpenTelemetry ``key=value,...``
    list (values URL-encoded), as ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_*_HEADERS`` are."""
    text = next((os.environ[name] for name in names if os.environ.get(name)), "")
    pairs = {}
    for item in text.split(","):
        key, equals, value = item.partition("=")
        if equals and key.strip():
            pairs[key.strip()] = unquote(value.strip())
    return pairs


def resource_attributes(version: str) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES``, then the service's own name and version over them."""
    return {
        **env_pairs("OTEL_RESOURCE_ATTRIBUTES"),
        "service.name": "aviso-server",
        "service.version": version,
    }


def export_request(
    records: Iterable[QueuedRecord], resource: Mapping[str, str]
) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=_key_values(resource)),
                scope_logs=[
                    ScopeLogs(
                        scope=InstrumentationScope(name=SCOPE_NAME),
                        log_records=[_log_record(record) for record in records],
                    )
                ],
            )
        ]
    )


def _log_record(record: QueuedRecord) -> LogRecord:
    """Body = the line's message, attributes = its other members (``logger``, ``request_id``,
    the audit fields, the event's fields), so OTLP carries exactly the JSON log's text."""
    entry = json.loads(record.line)
    return LogRecord(
        time_unix_nano=record.time_unix_nano,
        observed_time_unix_nano=record.observed_time_unix_nano,
        severity_number=_SEVERITIES.get(record.levelno, SEVERITY_NUMBER_INFO),
        severity_text=_SEVERITY_TEXT.get(record.levelno, record.levelname),
        body=_any_value(entry.get("message", "")),
        attributes=_key_values(
            {
                key: value
                for key, value in entry.items()
                if key not in _NOT_ATTRIBUTES and value is not None
            }
        ),
    )


def _key_values(attributes: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=key, value=_any_value(value)) for key, value in attributes.items()]


def _any_value(value: Any) -> AnyValue:
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int) and value in _INT64:
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=dumps(value, sort_keys=False))


class Attempt(Enum):
    DELIVERED = "delivered"
    TRANSIENT = "transient"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class Outcome:
    attempt: Attempt
    reason: str = ""


DELIVERED = Outcome(Attempt.DELIVERED)


class Sender(Protocol):
    def send(self, request: ExportLogsServiceRequest, timeout: float) -> Outcome: ...

    def close(self) -> None: ...


def send_with_retries(
    send: Callable[[float], Outcome], timeout: float, stopping: threading.Event
) -> Outcome:
    """``send`` (given the seconds it may take) until delivered, refused, or ``timeout`` is
    spent; no retry once ``stopping`` is set (the last records leave in one try each)."""
    deadline = time.monotonic() + timeout
    wait = FIRST_RETRY_WAIT_SECONDS
    while True:
        outcome = send(max(deadline - time.monotonic(), 0.001))
        if outcome.attempt is not Attempt.TRANSIENT:
            return outcome
        if time.monotonic() + wait >= deadline or stopping.wait(wait):
            return outcome
        wait *= 2


class HttpSender:
    """OTLP/HTTP: the binary protobuf POSTed to the endpoint (which ends in ``/v1/logs``)."""

    def __init__(self, endpoint: str, headers: Mapping[str, str]) -> None:
        self._endpoint = endpoint
        self._client = httpx.Client(
            headers={**headers, "Content-Type": "application/x-protobuf"},
        )

    def send(self, request: ExportLogsServiceRequest, timeout: float) -> Outcome:
        try:
            response = self._client.post(
                self._endpoint, content=request.SerializeToString(), timeout=timeout
            )
        except httpx.TransportError as exc:
            return Outcome(Attempt.TRANSIENT, f"{type(exc).__name__}: {exc}")
        if response.is_success:
            return DELIVERED
        reason = f"HTTP {response.status_code}"
        if response.status_code in _RETRYABLE_HTTP:
            return Outcome(Attempt.TRANSIENT, reason)
        return Outcome(Attempt.REFUSED, reason)

    def close(self) -> None:
        self._client.close()


class GrpcSender:
    """OTLP/gRPC: ``LogsService/Export``; plaintext for an ``http://`` endpoint, TLS with the
    system's roots otherwise."""

    def __init__(self, endpoint: str, headers: Mapping[str, str]) -> None:
        target = urlsplit(endpoint).netloc
        if endpoint.startswith("http://"):
            self._channel = grpc.insecure_channel(target)
        else:
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials())
        self._stub = LogsServiceStub(self._channel)
        self._metadata = tuple((key.lower(), value) for key, value in headers.items())

    def send(self, request: ExportLogsServiceRequest, timeout: float) -> Outcome:
        try:
            self._stub.Export(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            # What a unary call raises is also its grpc.Call, which carries the status.
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            kind = Attempt.TRANSIENT if code in _RETRYABLE_GRPC else Attempt.REFUSED
            return Outcome(kind, f"gRPC {code.name}")
        return DELIVERED

    def close(self) -> None:
        self._channel.close()


def sender(endpoint: str, protocol: str) -> Sender:
    headers = env_pairs("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
    if protocol == "http":
        return HttpSender(endpoint, headers)
    return GrpcSender(endpoint, headers)


class Exporter:
    """Batches to one collector: each encoded once and sent within ``timeout`` seconds."""

    def __init__(
        self, endpoint: str, protocol: str, version: str, timeout: float, stopping: threading.Event
    ) -> None:
        self._resource = resource_attributes(version)
        self._sender = sender(endpoint, protocol)
        self._timeout = timeout
        self._stopping = stopping

    def export(self, batch: Iterable[QueuedRecord]) -> str | None:
        """``None`` once the collector took ``batch``, else why it did not."""
        try:
            request = export_request(batch, self._resource)
            outcome = send_with_retries(
                lambda timeout: self._sender.send(request, timeout), self._timeout, self._stopping
            )
        except Exception as exc:  # a record that cannot be encoded must not stop the thread
            return f"{type(exc).__name__}: {exc}"
        return None if outcome.attempt is Attempt.DELIVERED else outcome.reason

    def close(self) -> None:
        self._sender.close()
