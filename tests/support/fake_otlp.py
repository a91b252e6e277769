"""Loopback OTLP log receivers: over HTTP, each ``POST /v1/logs`` body (a protobuf
``ExportLogsServiceRequest``) decoded with the opentelemetry-proto package; over gRPC, the
``LogsService`` of opentelemetry-proto's generated module on a grpcio server. Both keep the
records.

Set ``hang`` before the first export to make the HTTP receiver read each request and then
never answer until ``release()`` (a collector that hangs). Give the gRPC receiver ``refusals``
(status codes) to answer its first exports with.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import (
    LogsServiceServicer,
    add_LogsServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.loopback import Handler, serve

LOGS_PATH = "/v1/logs"


@dataclass(frozen=True)
class ReceivedRecord:
    body: str
    severity: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


@dataclass
class OtlpReceiver:
    url: str = ""
    hang: bool = False
    records: list[ReceivedRecord] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    hanging: int = 0
    """Export requests read and held unanswered right now."""
    metadata: list[dict[str, str]] = field(default_factory=list)
    """gRPC: each export's request metadata."""
    refusals: list[grpc.StatusCode] = field(default_factory=list)
    """gRPC: the status codes the next exports are answered with, in order."""
    changed: threading.Condition = field(default_factory=threading.Condition)
    released: threading.Event = field(default_factory=threading.Event)

    @property
    def endpoint(self) -> str:
        """host:port, without scheme or path (aviso adds both)."""
        return self.url.removeprefix("http://")

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout), "OTLP receiver: condition unmet"

    def with_attribute(self, key: str, value: Any) -> list[ReceivedRecord]:
        with self.changed:
            return [record for record in self.records if record.attributes.get(key) == value]

    def release(self) -> None:
        self.released.set()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


def _decode(body: bytes) -> list[ReceivedRecord]:
    request = ExportLogsServiceRequest()
    request.ParseFromString(body)
    return _records(request)


def _records(request: ExportLogsServiceRequest) -> list[ReceivedRecord]:
    records = []
    for resource_logs in request.resource_logs:
        resource = {kv.key: _value(kv.value) for kv in resource_logs.resource.attributes}
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                records.append(
                    ReceivedRecord(
                        body=_value(record.body),
                        severity=record.severity_text,
                        attributes={kv.key: _value(kv.value) for kv in record.attributes},
                        resource=resource,
                    )
                )
    return records


class _OtlpHandler(Handler):
    def do_POST(self) -> None:
        receiver: OtlpReceiver = self.server.owner  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        records = _decode(body)
        with receiver.changed:
            receiver.paths.append(self.path)
            receiver.records.extend(records)
            if receiver.hang:
                receiver.hanging += 1
            receiver.changed.notify_all()
        if receiver.hang:
            receiver.released.wait(60)
            with receiver.changed:
                receiver.hanging -= 1
        self.reply(
            200,
            ExportLogsServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )


@contextmanager
def otlp_receiver(hang: bool = False) -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver(hang=hang)
    with serve(_OtlpHandler, receiver) as url:
        receiver.url = url
        try:
            yield receiver
        finally:
            receiver.release()  # before the server stops: no handler thread left waiting


class _LogsService(LogsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    def Export(
        self, request: ExportLogsServiceRequest, context: grpc.ServicerContext
    ) -> ExportLogsServiceResponse:
        receiver = self.receiver
        with receiver.changed:
            receiver.metadata.append(dict(context.invocation_metadata()))
            refusal = receiver.refusals.pop(0) if receiver.refusals else None
            if refusal is None:
                receiver.records.extend(_records(request))
            receiver.changed.notify_all()
        if refusal is not None:
            context.abort(refusal, "refused by the test")
        return ExportLogsServiceResponse()


@contextmanager
def otlp_grpc_receiver(refusals: list[grpc.StatusCode] | None = None) -> Iterator[OtlpReceiver]:
    """``url`` is ``http://127.0.0.1:PORT`` (plaintext gRPC)."""
    receiver = OtlpReceiver(refusals=list(refusals or ()))
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    add_LogsServiceServicer_to_server(_LogsService(receiver), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    receiver.url = f"http://127.0.0.1:{port}"
    try:
        yield receiver
    finally:
        server.stop(grace=None)
