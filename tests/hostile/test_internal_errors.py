"""Nothing internal reaches a client: plugins that crash and a backend that fails with a
configured secret in its exception text are answered with a stable code, a generic message
and the request id; the exception, secret masked, goes to the log once, at error level, with
the caller who made the request."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import httpx
import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_builtins.otlp.sdk import OtlpHandler
from aviso_host.logs import JsonLineFormatter, register_secrets
from aviso_host.streaming.frames import BATCH_FAILED_MESSAGE
from aviso_plugins import hookimpl
from aviso_plugins._shared.sse import SSEParser
from aviso_plugins.testing import AvisoClient, serve
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import (
    AuthProvider,
    AuthRequest,
    Batch,
    Caller,
    FieldHandler,
    LiveSink,
    StartCursor,
    StorageBackend,
    StoredNotification,
)

HANDLER_KEY = "hk-5d1e0c7a93f2b846"
BACKEND_PASSWORD = "pw-83c2f0e9a1d47b65"
SECRETS = (HANDLER_KEY, BACKEND_PASSWORD)
CALLER = "alice-the-operator"
AS_CALLER = {"X-Caller": CALLER}
# What an exception's text or a traceback would show.
INTERNALS = ("Traceback", "RuntimeError", "refused the key", "lost its disk", 'File "')


class CrashingHandler(FieldHandler):
    """Accepts any text except ``crash``, on which it fails the way a buggy plugin calling
    a remote service would: with its credentials in the exception text."""

    type_name: ClassVar[str] = "CrashingHandler"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {"api_key": {"type": "string"}}

    def canonicalise(self, text: str) -> str:
        if text == "crash":
            raise RuntimeError(f"lookup service refused the key {self.definition['api_key']}")
        return text


class FailingBackend(InMemoryBackend):
    """The in-memory backend, failing every operation on topics of base ``failing`` (and
    every admin operation) with its password in the exception text."""

    kind: ClassVar[str] = "failing"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {"password": {"type": "string", "writeOnly": True}},
    }

    def _fail(self) -> RuntimeError:
        return RuntimeError(f"store lost its disk (login {self.context.options['password']})")

    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        if topic.startswith("failing."):
            raise self._fail()
        return await super().publish(topic, payload, metadata)

    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        if pattern.base == "failing":
            raise self._fail()
        return await super().fetch_batch(pattern, start, limit)

    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> Any:
        if pattern.base == "failing":
            raise self._fail()
        return await super().subscribe(pattern, sink)

    async def delete_message(self, stream: str, sequence: int) -> bool:
        raise self._fail()

    async def wipe_stream(self, name: str) -> None:
        raise self._fail()

    async def wipe_all(self) -> None:
        raise self._fail()


class HeaderCaller(AuthProvider):
    """The caller named by ``X-Caller`` (an admin), anonymous without it."""

    mode: ClassVar[str] = "header_caller"

    async def authenticate(self, request: AuthRequest) -> Caller | None:
        name = request.headers.get("X-Caller")
        return Caller(name, "lab", frozenset({"admin"})) if name else None


class LeakyPlugins:
    @hookimpl
    def aviso_field_handlers(self) -> list[type[FieldHandler]]:
        return [CrashingHandler]

    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [FailingBackend]

    @hookimpl
    def aviso_auth_providers(self) -> list[type[AuthProvider]]:
        return [HeaderCaller]


def _keyed(base: str, definition: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "topic": {"base": base, "key_order": ["name"]},
        "identifier": {"name": {"required": True, **definition}},
    }


CONFIG = {
    "notification_backend": {"kind": "failing", "failing": {"password": BACKEND_PASSWORD}},
    "auth": {"enabled": True, "mode": "header_caller", "admin_roles": {"lab": ["admin"]}},
    "notification_schema": {
        "crashy": _keyed("crashy", {"type": "CrashingHandler", "api_key": HANDLER_KEY}),
        "failing": _keyed("failing", {"type": "StringHandler"}),
        "fine": _keyed("fine", {"type": "StringHandler"}),
    },
}


class _Lines(logging.Handler):
    """Every log line as the JSON log writes it (masking and audit fields included)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonLineFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def aviso() -> Iterator[AvisoClient]:
    with serve(CONFIG, plugins=[LeakyPlugins()]) as client:
        yield client


@pytest.fixture
def log() -> Iterator[_Lines]:
    lines = _Lines()
    root = logging.getLogger()
    root.addHandler(lines)
    try:
        yield lines
    finally:
        root.removeHandler(lines)


def assert_nothing_internal(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text
    for trace in INTERNALS:
        assert trace not in text, text


def assert_generic_500(answer: httpx.Response, code: str, message: str) -> dict[str, Any]:
    assert answer.status_code == 500, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert_nothing_internal(answer.text)
    body = answer.json()
    assert body["code"] == code, body
    assert body["message"] == message, body
    assert body.get("details", message) == message, body
    assert body["request_id"] == answer.headers["x-request-id"]
    return body


def assert_logged_once(log: _Lines, request_id: str, cause: str, secret: str) -> None:
    """One error-level line for the request, with the cause, the masked secret, the
    traceback and the real caller; the secret itself nowhere in the log."""
    errors = [
        line
        for line in log.lines
        if f'"request_id":"{request_id}"' in line and '"level":"error"' in line
    ]
    assert len(errors) == 1, errors
    [line] = errors
    assert cause in line and "[REDACTED]" in line and "Traceback" in line, line
    assert f'"username":"{CALLER}"' in line, line
    assert all(secret not in logged for logged in log.lines)


@pytest.mark.parametrize("path", ["/api/v1/watch", "/api/v1/replay", "/api/v1/aggregate"])
def test_a_field_handler_crashing_on_a_stream_request_is_a_generic_500(
    aviso: AvisoClient, log: _Lines, path: str
) -> None:
    body: dict[str, Any] = {"event_type": "crashy", "identifier": {"name": "crash"}}
    if path != "/api/v1/watch":
        body["from_id"] = "1"
    if path == "/api/v1/aggregate":
        body["group_by"] = ["name"]
    answer = aviso.post(path, json=body, headers=AS_CALLER)
    error = assert_generic_500(answer, "INTERNAL_ERROR", "Internal server error")
    assert_logged_once(log, error["request_id"], "refused the key", HANDLER_KEY)


def test_a_field_handler_crashing_on_notify_is_a_generic_500(
    aviso: AvisoClient, log: _Lines
) -> None:
    answer = aviso.notify("crashy", {"name": "crash"}, {"n": 1}, headers=AS_CALLER)
    error = assert_generic_500(
        answer, "NOTIFICATION_PROCESSING_FAILED", "Failed to process notification"
    )
    assert_logged_once(log, error["request_id"], "refused the key", HANDLER_KEY)
    # The handler still serves every other value.
    assert aviso.notify("crashy", {"name": "fine"}, {"n": 1}).status_code == 200


def test_a_backend_failure_on_notify_says_nothing_of_its_cause(
    aviso: AvisoClient, log: _Lines
) -> None:
    answer = aviso.notify("failing", {"name": "a"}, {"n": 1}, headers=AS_CALLER)
    error = assert_generic_500(
        answer, "NOTIFICATION_STORAGE_FAILED", "Failed to store notification"
    )
    assert_logged_once(log, error["request_id"], "lost its disk", BACKEND_PASSWORD)


def test_a_backend_failure_opening_a_watch_says_nothing_of_its_cause(
    aviso: AvisoClient, log: _Lines
) -> None:
    body = {"event_type": "failing", "identifier": {"name": "a"}}
    answer = aviso.post("/api/v1/watch", json=body, headers=AS_CALLER)
    error = assert_generic_500(
        answer, "SSE_STREAM_INITIALIZATION_FAILED", "Failed to create stream consumer"
    )
    assert error["topic"] == "failing.a"
    assert_logged_once(log, error["request_id"], "lost its disk", BACKEND_PASSWORD)


def test_a_backend_failure_during_a_replay_is_a_generic_stream_error(
    aviso: AvisoClient, log: _Lines
) -> None:
    body = {"event_type": "failing", "identifier": {"name": "a"}, "from_id": "1"}
    answer = aviso.post("/api/v1/replay", json=body, headers=AS_CALLER)
    assert answer.status_code == 200
    assert_nothing_internal(answer.text)
    events = SSEParser().feed(answer.content)
    errors = [json.loads(event.data) for event in events if event.event == "error"]
    assert errors == [
        {
            "error": "stream_processing_failed",
            "message": BATCH_FAILED_MESSAGE,
            "topic": "failing.a",
            "request_id": answer.headers["x-request-id"],
        }
    ]
    assert_logged_once(log, answer.headers["x-request-id"], "lost its disk", BACKEND_PASSWORD)


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        ("DELETE", "/api/v1/admin/notification/fine@1", None, "Failed to delete notification"),
        ("DELETE", "/api/v1/admin/wipe/stream", {"stream_name": "fine"}, "Failed to wipe stream"),
        ("DELETE", "/api/v1/admin/wipe/all", None, "Failed to wipe all data"),
    ],
)
def test_a_backend_failure_on_an_admin_request_says_nothing_of_its_cause(
    aviso: AvisoClient, log: _Lines, method: str, path: str, body: Any, message: str
) -> None:
    answer = aviso.request(method, path, json=body, headers=AS_CALLER)
    assert answer.status_code == 500, answer.text
    assert_nothing_internal(answer.text)
    assert answer.json()["message"] == message
    assert_logged_once(log, answer.headers["x-request-id"], "lost its disk", BACKEND_PASSWORD)


@pytest.mark.parametrize(
    ("field", "value"),
    [("from_id", BACKEND_PASSWORD), ("event_type", HANDLER_KEY)],
)
def test_a_configured_secret_is_masked_in_a_refusal(
    aviso: AvisoClient, field: str, value: str
) -> None:
    """A 400 repeats the client's input, masked as the log masks it."""
    body = {"event_type": "fine", "identifier": {"name": "a"}, "from_id": "1", field: value}
    answer = aviso.post("/api/v1/replay", json=body)
    assert answer.status_code == 400, answer.text
    assert value not in answer.text and "[REDACTED]" in answer.text, answer.text


def test_the_otlp_export_masks_and_caps_as_the_json_log() -> None:
    """The OTLP handler emits each record as the JSON log line writes it."""
    secret = "otlp-7e1d9c3b5a2f"
    register_secrets([secret])
    exported = InMemoryLogRecordExporter()
    provider = LoggerProvider(shutdown_on_exit=False)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exported))
    record = logging.LogRecord("aviso", logging.ERROR, __file__, 1, "%s", (secret,), None)
    record.fields = {"event_name": "x", "details": f"{secret} {'y' * 10_000}"}
    OtlpHandler(provider.get_logger("test"), JsonLineFormatter()).emit(record)
    (emitted,) = exported.get_finished_logs()
    assert emitted.log_record.body == "[REDACTED]"
    attributes = dict(emitted.log_record.attributes or {})
    assert secret not in json.dumps(attributes)
    assert len(str(attributes["details"])) < 4_200
    assert record.getMessage() == secret, "the original record is left as it was"


@pytest.mark.parametrize(
    "path", ["/api/v1/schema", "/api/v1/schema/crashy", "/api-docs/openapi.json"]
)
def test_the_public_schema_views_mask_a_handlers_secret_option(
    aviso: AvisoClient, path: str
) -> None:
    answer = aviso.get(path)
    assert answer.status_code == 200
    assert HANDLER_KEY not in answer.text
    if path == "/api/v1/schema/crashy":
        assert answer.json()["schema"]["identifier"]["name"]["api_key"] == "[REDACTED]"


@pytest.mark.parametrize(
    "body",
    [b"", b"[1,]", b'{"event_type": "\xff"}', b'{"event_type": 1' + b"0" * 5_000 + b"}"],
    ids=["empty", "syntax", "not-utf-8", "digits"],
)
def test_a_body_that_is_not_json_is_refused_in_avisos_words(
    aviso: AvisoClient, body: bytes
) -> None:
    """Not the JSON parser's, the codec's or int()'s own messages."""
    answer = aviso.post("/api/v1/notification", content=body)
    assert answer.status_code == 400, answer.text
    message = answer.json()["message"]
    assert message.startswith("JSON parsing failed: "), message
    for text in ("Expecting", "codec", "Exceeds the limit", "(char "):
        assert text not in answer.text, answer.text
