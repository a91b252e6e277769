"""Metrics conformance.

Real uvicorn servers with the metrics listener on a free loopback port, scraped over HTTP;
auth and ECPDS through the loopback fakes. Counters are compared before and after, so the
module-scoped servers can be shared between tests.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_host.app import create_app
from aviso_host.config import ConfigError, settings_from_document
from aviso_host.metrics import metrics_app
from aviso_host.plugins import discover
from aviso_plugins import hookimpl
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import Batch, StartCursor, StorageBackend
from tests.conformance.auth_support import document as auth_document
from tests.conformance.auth_support import read_body
from tests.conformance.helpers import UUID_RE
from tests.conformance.metrics_support import Metered, metered, parse, with_metrics
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.fake_ecpds import fake_ecpds
from tests.support.server import running_server, serve_app
from tests.support.sse import DEFAULT_TIMEOUT, Stream, collect
from tests.support.tokens import bearer, mint

NOTIFY = "/api/v1/notification"
WATCH = "/api/v1/watch"
REPLAY = "/api/v1/replay"
DECLARED = ("river_gauge", "storm_cell")
# Heartbeats every second, so a vanished watcher is noticed quickly.
QUICK_HEARTBEAT = with_changes(API_EXAMPLE, watch_endpoint={"sse_heartbeat_interval_sec": 1})


def gauge(basin: str, **extra: Any) -> dict[str, Any]:
    return {"event_type": "river_gauge", "identifier": {"basin": basin, **extra}}


def notify(client: httpx.Client, basin: str) -> httpx.Response:
    body = {**gauge(basin, date="2026-04-02", level=4), "payload": {"n": 1}}
    return client.post(NOTIFY, content=json.dumps(body))


def unique_basin() -> str:
    return f"m{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def server(for_backend: ForBackend) -> Iterator[Metered]:
    with metered(for_backend(QUICK_HEARTBEAT)) as running:
        yield running


@pytest.fixture
def client(server: Metered) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10.0) as http:
        yield http


@pytest.fixture(scope="module")
def pristine(for_backend: ForBackend) -> Iterator[Metered]:
    """A server nobody sends traffic to: only scrapes, which are not counted."""
    with metered(for_backend(API_EXAMPLE)) as running:
        yield running


@pytest.fixture(scope="module")
def with_auth() -> Iterator[Metered]:
    """Direct auth against the fake auth-o-tron, in-memory."""
    with fake_auth_o_tron() as aot, metered(auth_document("direct", aot.url)) as running:
        yield running


def token(user: str, roles: tuple[str, ...] = ("reader",)) -> dict[str, str]:
    return bearer(mint(user, "localrealm", list(roles)))


# -- invalid settings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "metrics",
    [{"enabled": True}, {"enabled": True, "port": 0}, {"enabled": True, "port": 8000}],
    ids=["no-port", "port-0", "same-as-application"],
)
def test_invalid_metrics_settings_abort_startup(metrics: dict[str, Any]) -> None:
    """Also covered rule by rule in tests/host/config/test_config_rules.py
    (``test_enabled_metrics_rules``)."""
    document = with_changes(API_EXAMPLE, application={"port": 8000}, metrics=metrics)
    with pytest.raises(ConfigError, match=r"^metrics"):
        settings_from_document(document, discover())


def test_metrics_port_in_use_aborts_startup() -> None:
    """Failure to bind the metrics port aborts startup (the main port is never served)."""
    with metered(API_EXAMPLE) as first:
        port = int(first.metrics_url.rsplit(":", 1)[1].split("/")[0])
        with (
            pytest.raises(RuntimeError, match="did not start"),
            running_server(with_metrics(API_EXAMPLE, port)),
        ):
            pass


# -- the metrics listener ------------------------------------------------------------------


def test_metrics_listener_and_no_main_port_route(server: Metered) -> None:
    response = httpx.get(server.metrics_url, timeout=10.0)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert UUID_RE.match(response.headers["x-request-id"])
    assert "aviso_build_info" in response.text
    main = httpx.get(f"{server.url}/metrics", timeout=10.0)
    assert main.status_code == 404
    assert UUID_RE.match(main.headers["x-request-id"])


def test_scrapes_are_not_counted_as_http_requests(server: Metered) -> None:
    server.scrape()
    assert not [
        labels
        for labels in server.scrape().series("aviso_http_requests_total")
        if labels["route"] == "/metrics"
    ]


def _mounted_scrape(document: dict[str, Any]) -> Any:
    """Mount aviso and its registry in a gateway, read a schema and notify once; the scrape."""
    registry = discover()
    aviso = create_app(settings_from_document(document, registry), registry)
    gateway = Starlette(
        routes=[
            Mount("/aviso", app=aviso),
            Mount("/aviso-metrics", app=metrics_app(aviso.state.service.metrics)),
        ]
    )
    with (
        serve_app(gateway, aviso.state.service) as running,
        httpx.Client(base_url=running.url, timeout=10.0) as http,
    ):
        assert http.get("/aviso/api/v1/schema/storm_cell").status_code == 200
        body = {**gauge(unique_basin(), date="2026-04-02", level=4), "payload": {"n": 1}}
        assert http.post(f"/aviso{NOTIFY}", json=body).status_code == 200
        response = http.get("/aviso-metrics/metrics")
    assert response.status_code == 200
    return parse(response.text)


def test_embedded_app_exposes_its_registry_where_the_gateway_mounts_it() -> None:
    """docs/metrics.md "Embedded (mounted) use": route labels stay prefix-free templates."""
    scrape = _mounted_scrape(with_metrics(API_EXAMPLE))
    labels = {"route": "/api/v1/schema/{event_type}", "method": "GET", "status_code": "200"}
    assert scrape.value("aviso_http_requests_total", **labels) == 1
    publish = {"backend": "in_memory", "operation": "publish", "outcome": "ok"}
    assert scrape.value("aviso_backend_operations_total", **publish) == 1


def test_disabled_metrics_install_no_per_request_instrumentation() -> None:
    """docs/metrics.md: with ``metrics.enabled: false`` HTTP and backend families stay at
    their startup values (no middleware, no backend timing on the request path)."""
    scrape = _mounted_scrape(API_EXAMPLE)
    assert scrape.series("aviso_http_requests_total") == []
    publish = {"backend": "in_memory", "operation": "publish", "outcome": "ok"}
    assert scrape.value("aviso_backend_operations_total", **publish) == 0
    success = {"event_type": "river_gauge", "status": "success"}
    assert scrape.value("aviso_notifications_total", **success) == 1


# -- series at zero ------------------------------------------------------------------------


def test_series_present_at_zero_after_startup(pristine: Metered, backend: str) -> None:
    scrape = pristine.scrape()
    build = scrape.series("aviso_build_info")
    assert len(build) == 1 and build[0]["version"]
    assert scrape.value("aviso_build_info", **build[0]) == 1
    auth = scrape.series("aviso_auth_requests_total")
    assert sorted((s["mode"], s["outcome"]) for s in auth) == sorted(
        (mode, outcome)
        for mode in ("direct", "trusted_proxy")
        for outcome in ("success", "unauthorized", "forbidden", "service_unavailable")
    )
    assert all(scrape.value("aviso_auth_requests_total", **labels) == 0 for labels in auth)
    notifications = {
        (s["event_type"], s["status"]) for s in scrape.series("aviso_notifications_total")
    }
    expected = {("unknown", "error"), ("unknown", "rejected")}
    expected |= {(t, status) for t in DECLARED for status in ("success", "error")}
    assert notifications == expected
    operations = scrape.series("aviso_backend_operations_total")
    assert len(operations) == 10
    assert {s["backend"] for s in operations} == {backend}
    assert {(s["operation"], s["outcome"]) for s in operations} == {
        (operation, outcome)
        for operation in ("publish", "get_batch", "wipe_stream", "wipe_all", "delete_message")
        for outcome in ("ok", "error")
    }
    for labels in operations:
        assert scrape.value("aviso_backend_operations_total", **labels) == 0
        assert scrape.value("aviso_backend_operation_duration_seconds_count", **labels) == 0
    # The HTTP and SSE families appear only once something was recorded.
    assert scrape.series("aviso_http_requests_total") == []
    assert scrape.series("aviso_sse_connections_total") == []


def test_ecpds_series_present_at_zero_after_startup(pristine: Metered) -> None:
    scrape = pristine.scrape()
    decisions = {s["outcome"] for s in scrape.series("aviso_ecpds_access_decisions_total")}
    assert decisions == {
        "allow",
        "deny_destination",
        "deny_match_key_missing",
        "unavailable",
        "admin_bypass",
        "error",
    }
    fetches = {s["outcome"] for s in scrape.series("aviso_ecpds_fetch_total")}
    assert fetches == {
        "success",
        "http_401",
        "http_403",
        "http_4xx",
        "http_5xx",
        "invalid_response",
        "unreachable",
    }
    for name in ("aviso_ecpds_access_decisions_total", "aviso_ecpds_fetch_total"):
        assert all(scrape.value(name, **labels) == 0 for labels in scrape.series(name))
    for name in ("aviso_ecpds_cache_hits_total", "aviso_ecpds_cache_misses_total"):
        assert scrape.value(name) == 0
    assert scrape.value("aviso_ecpds_cache_size") == 0


# -- notify outcomes -----------------------------------------------------------------------


def test_successful_notify(server: Metered, client: httpx.Client, backend: str) -> None:
    success = {"event_type": "river_gauge", "status": "success"}
    publish = {"backend": backend, "operation": "publish", "outcome": "ok"}
    before = server.scrape()
    assert notify(client, unique_basin()).status_code == 200
    after = server.scrape()
    notified = "aviso_notifications_total"
    assert after.value(notified, **success) == before.value(notified, **success) + 1
    published = "aviso_backend_operations_total"
    assert after.value(published, **publish) == before.value(published, **publish) + 1


def test_notify_errors_and_rejections(server: Metered, client: httpx.Client) -> None:
    name = "aviso_notifications_total"
    unknown_error = {"event_type": "unknown", "status": "error"}
    unknown_rejected = {"event_type": "unknown", "status": "rejected"}
    before = server.scrape()
    assert client.post(NOTIFY, content=b"{not json").status_code == 400
    undeclared = {"event_type": "no_such_type", "identifier": {"a": "b"}}
    assert client.post(NOTIFY, content=json.dumps(undeclared)).status_code == 400
    after = server.scrape()
    assert after.value(name, **unknown_error) == before.value(name, **unknown_error) + 1
    assert after.value(name, **unknown_rejected) == before.value(name, **unknown_rejected) + 1


def test_stream_write_policy_403_is_rejected(with_auth: Metered) -> None:
    name = "aviso_notifications_total"
    labels = {"event_type": "producer_feed", "status": "rejected"}
    before = with_auth.scrape().value(name, **labels) or 0
    body = {"event_type": "producer_feed", "identifier": {"name": "n1"}}
    response = httpx.post(
        f"{with_auth.url}{NOTIFY}", content=json.dumps(body), headers=token("reader-only")
    )
    assert response.status_code == 403, response.text
    assert with_auth.scrape().value(name, **labels) == before + 1


def test_caller_resolution_outcomes_are_counted(with_auth: Metered) -> None:
    name = "aviso_auth_requests_total"
    before = with_auth.scrape()
    with httpx.Client(base_url=with_auth.url, timeout=10.0) as http:
        body = json.dumps(read_body("public_feed", REPLAY, {"name": "metrics-auth"}))
        assert http.post(REPLAY, content=body, headers=token("someone")).status_code == 200
        assert http.post(REPLAY, content=body).status_code == 200  # anonymous: not counted
        assert http.delete("/api/v1/admin/wipe/all").status_code == 401
        assert http.delete("/api/v1/admin/wipe/all", headers=token("someone")).status_code == 403
    after = with_auth.scrape()
    for outcome in ("success", "unauthorized", "forbidden"):
        labels = {"mode": "direct", "outcome": outcome}
        assert after.value(name, **labels) == before.value(name, **labels) + 1, outcome
    # Refused before routing, still labelled with the route template.
    refused = {"route": "/api/v1/admin/wipe/all", "method": "DELETE", "status_code": "401"}
    assert after.value("aviso_http_requests_total", **refused) == 1


# -- HTTP labels ---------------------------------------------------------------------------


def test_http_route_templates_and_methods(server: Metered, client: httpx.Client) -> None:
    name = "aviso_http_requests_total"
    schema = {"route": "/api/v1/schema/{event_type}", "method": "GET", "status_code": "200"}
    unmatched = {"route": "unmatched", "method": "GET", "status_code": "404"}
    before = server.scrape()
    assert client.get("/api/v1/schema/river_gauge").status_code == 200
    assert client.get("/nope").status_code == 404
    propfind = client.request("PROPFIND", "/api/v1/schema")
    after = server.scrape()
    assert after.value(name, **schema) == (before.value(name, **schema) or 0) + 1
    assert after.value(name, **unmatched) == (before.value(name, **unmatched) or 0) + 1
    other = {"route": "/api/v1/schema", "method": "other", "status_code": "405"}
    assert propfind.status_code == 405
    assert after.value(name, **other) == (before.value(name, **other) or 0) + 1
    assert after.value(
        "aviso_http_request_duration_seconds_count", route=schema["route"], method="GET"
    )
    assert all(labels["route"] != "/api/v1/schema/river_gauge" for labels in after.series(name))
    assert after.value("aviso_http_requests_in_flight", method="GET") == 0


class FailingRoutePlugin:
    """An extra route that fails inside the server, so no routed response is produced."""

    @hookimpl
    def aviso_extra_routes(self) -> list[BaseRoute]:
        async def explode(request: Request) -> Response:
            raise RuntimeError("route exploded")

        return [Route("/explode", explode, methods=["GET"])]


def test_a_request_failing_inside_the_server_is_labelled_error() -> None:
    name = "aviso_http_requests_total"
    with metered(API_EXAMPLE, (FailingRoutePlugin(),)) as running:
        with httpx.Client(base_url=running.url, timeout=10.0) as http:
            assert http.get("/explode").status_code == 500
        scrape = running.scrape()
    assert scrape.value(name, route="error", method="GET", status_code="500") == 1
    assert scrape.value("aviso_http_requests_in_flight", method="GET") == 0


def test_undeclared_event_types_are_labelled_generic() -> None:
    """Non-strict mode: labels stay bounded whatever event types clients invent."""
    document = with_changes(API_EXAMPLE, notification_schema_strict=False)
    invented = {"event_type": f"invented_{uuid.uuid4().hex[:8]}", "identifier": {"k": "v"}}
    with (
        metered(document) as running,
        httpx.Client(base_url=running.url, timeout=DEFAULT_TIMEOUT) as http,
    ):
        assert http.post(NOTIFY, content=json.dumps(invented)).status_code == 200
        events = collect(http, REPLAY, {**invented, "from_id": "1"})
        assert [e.name for e in events].count("replay") == 1
        scrape = running.scrape()
    assert scrape.value("aviso_notifications_total", event_type="generic", status="success") == 1
    sse = {"route": REPLAY, "event_type": "generic"}
    assert scrape.value("aviso_sse_connections_total", **sse) == 1
    assert scrape.value("aviso_sse_events_sent_total", **sse) == 1
    assert invented["event_type"] not in scrape.text


# -- SSE -----------------------------------------------------------------------------------


def test_active_watch_gauge_and_duration(server: Metered) -> None:
    watch_labels = {"route": WATCH, "event_type": "river_gauge"}
    duration = "aviso_sse_connection_duration_seconds_count"
    before = server.scrape()
    total_before = before.value("aviso_sse_connections_total", **watch_labels) or 0
    active_before = before.value("aviso_sse_connections_active", **watch_labels) or 0
    closed_before = before.value(duration, route=WATCH) or 0
    with (
        httpx.Client(base_url=server.url, timeout=DEFAULT_TIMEOUT) as http,
        http.stream("POST", WATCH, content=json.dumps(gauge(unique_basin()))) as response,
    ):
        assert response.status_code == 200
        events = Stream(response).events()  # kept: dropping it would close the response
        first = next(events)
        assert first.kind == "live-notification/connection_established"
        during = server.scrape()
        assert during.value("aviso_sse_connections_active", **watch_labels) == active_before + 1
    after = server.wait_for(
        lambda s: s.value("aviso_sse_connections_active", **watch_labels) == active_before
    )
    assert after.value("aviso_sse_connections_active", **watch_labels) == active_before
    assert after.value("aviso_sse_connections_total", **watch_labels) == total_before + 1
    assert after.value(duration, route=WATCH) == closed_before + 1


def test_aggregate_streams_are_counted_under_their_route(server: Metered) -> None:
    labels = {"route": "/api/v1/aggregate", "event_type": "river_gauge"}
    before = server.scrape().value("aviso_sse_connections_total", **labels) or 0
    body = {**gauge(unique_basin()), "group_by": ["level"]}
    with (
        httpx.Client(base_url=server.url, timeout=DEFAULT_TIMEOUT) as http,
        http.stream("POST", "/api/v1/aggregate", content=json.dumps(body)) as response,
    ):
        assert response.status_code == 200
        events = Stream(response).events()  # kept: dropping it would close the response
        assert next(events).name == "aggregate"
        during = server.scrape()
    assert during.value("aviso_sse_connections_total", **labels) == before + 1
    assert during.value("aviso_sse_connections_active", **labels) == 1


def test_unique_users_count_authenticated_users_once(with_auth: Metered) -> None:
    name = "aviso_sse_unique_users_active"
    body = json.dumps(read_body("public_feed", WATCH, {"name": "metrics-46"}))
    headers = token(f"metrics-user-{uuid.uuid4().hex[:8]}")
    before = with_auth.scrape().value(name, route=WATCH) or 0
    with (
        httpx.Client(base_url=with_auth.url, timeout=DEFAULT_TIMEOUT) as http,
        http.stream("POST", WATCH, content=body, headers=headers) as first,
        http.stream("POST", WATCH, content=body, headers=headers) as second,
    ):
        # The readers are kept: dropping one would close its response.
        readers = [Stream(response).events() for response in (first, second)]
        for reader in readers:
            next(reader)
        assert with_auth.scrape().value(name, route=WATCH) == before + 1
        with http.stream("POST", WATCH, content=body) as anonymous:
            assert anonymous.status_code == 200
            reader = Stream(anonymous).events()
            next(reader)
            assert with_auth.scrape().value(name, route=WATCH) == before + 1
    after = with_auth.wait_for(lambda s: s.value(name, route=WATCH) == before)
    assert after.value(name, route=WATCH) == before


def test_replay_counts_only_notification_frames(server: Metered, client: httpx.Client) -> None:
    name = "aviso_sse_events_sent_total"
    labels = {"route": REPLAY, "event_type": "river_gauge"}
    basin = unique_basin()
    for _ in range(3):
        assert notify(client, basin).status_code == 200
    before = server.scrape().value(name, **labels) or 0
    events = collect(client, REPLAY, {**gauge(basin), "from_id": "1"})
    assert [e.name for e in events].count("replay") == 3
    assert len(events) > 3  # control and closing events were written too
    assert server.scrape().value(name, **labels) == before + 3


# -- backend outcomes ----------------------------------------------------------------------


def test_deleting_a_missing_message_is_ok(
    server: Metered, client: httpx.Client, backend: str
) -> None:
    name = "aviso_backend_operations_total"
    labels = {"backend": backend, "operation": "delete_message", "outcome": "ok"}
    before = server.scrape().value(name, **labels)
    assert client.delete("/api/v1/admin/notification/gauge@999999999").status_code == 404
    assert server.scrape().value(name, **labels) == before + 1


class UnreadableStore(InMemoryBackend):
    """Accepts writes but cannot page history, like a store whose reads time out."""

    kind: ClassVar[str] = "unreadable_store"

    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        raise TimeoutError("history read timed out")


class UnreadableStorePlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [UnreadableStore]


def test_backend_errors_and_stream_errors_are_counted() -> None:
    document = with_changes(
        API_EXAMPLE, notification_backend={"kind": "unreadable_store", "unreadable_store": {}}
    )
    with (
        metered(document, (UnreadableStorePlugin(),)) as running,
        httpx.Client(base_url=running.url, timeout=DEFAULT_TIMEOUT) as http,
    ):
        events = collect(http, REPLAY, {**gauge(unique_basin()), "from_id": "1"})
        assert "error" in [e.name for e in events]
        scrape = running.scrape()
    failed = {"backend": "unreadable_store", "operation": "get_batch", "outcome": "error"}
    assert scrape.value("aviso_backend_operations_total", **failed) == 1
    assert scrape.value("aviso_backend_operation_duration_seconds_count", **failed) == 1
    errors = {"route": REPLAY, "event_type": "river_gauge"}
    assert scrape.value("aviso_sse_stream_errors_total", **errors) == 1


# -- ECPDS ---------------------------------------------------------------------------------


def test_ecpds_cache_fetch_and_decisions() -> None:
    user = f"ecpds-user-metrics-{uuid.uuid4().hex[:8]}"
    body = json.dumps(
        read_body("dissemination_ecpds", REPLAY, {"destination": "CIP", "class": "od"})
    )
    with (
        fake_auth_o_tron() as aot,
        fake_ecpds() as ecpds,
        metered(auth_document("direct", aot.url, [ecpds.url])) as running,
        httpx.Client(base_url=running.url, timeout=DEFAULT_TIMEOUT) as http,
    ):
        before = running.scrape()
        for _ in range(3):
            response = http.post(REPLAY, content=body, headers=token(user))
            assert response.status_code == 200, response.text
        after = running.scrape()
        assert ecpds.count(user) == 1

    def delta(name: str, **labels: str) -> float:
        return (after.value(name, **labels) or 0) - (before.value(name, **labels) or 0)

    assert delta("aviso_ecpds_cache_misses_total") == 1
    assert delta("aviso_ecpds_cache_hits_total") == 2
    assert delta("aviso_ecpds_fetch_total", outcome="success") == 1
    assert delta("aviso_ecpds_access_decisions_total", outcome="allow") == 3
    assert after.value("aviso_ecpds_cache_size") == 1


def test_ecpds_admin_bypass_and_denial_are_counted() -> None:
    name = "aviso_ecpds_access_decisions_total"
    with (
        fake_auth_o_tron() as aot,
        fake_ecpds() as ecpds,
        metered(auth_document("direct", aot.url, [ecpds.url])) as running,
        httpx.Client(base_url=running.url, timeout=DEFAULT_TIMEOUT) as http,
    ):

        def replay(identifier: dict[str, str], headers: dict[str, str]) -> int:
            payload = read_body("dissemination_ecpds", REPLAY, identifier)
            return http.post(REPLAY, content=json.dumps(payload), headers=headers).status_code

        user = f"ecpds-user-metrics-{uuid.uuid4().hex[:8]}"
        assert replay({"destination": "ANYTHING"}, token("boss", ("admin",))) == 200
        assert replay({"destination": "NOTMINE"}, token(user)) == 403
        scrape = running.scrape()
    assert scrape.value(name, outcome="admin_bypass") == 1
    assert scrape.value(name, outcome="deny_destination") == 1


def test_ecpds_rechecks_of_open_streams_are_counted_as_decisions() -> None:
    entitled = (200, {"success": "yes", "destinationList": [{"name": "CIP", "active": True}]})
    revoked = (200, {"success": "yes", "destinationList": [{"name": "FOO", "active": True}]})
    user = f"metrics-revocable-{uuid.uuid4().hex[:8]}"
    body = json.dumps(read_body("dissemination_ecpds", WATCH, {"destination": "CIP"}))
    with fake_ecpds() as ecpds:
        document = auth_document("trusted_proxy", "", [ecpds.url])
        document["ecpds"]["recheck_seconds"] = 1
        ecpds.set_answer(user, entitled)
        with (
            metered(document) as running,
            httpx.Client(base_url=running.url, timeout=DEFAULT_TIMEOUT) as http,
            http.stream("POST", WATCH, content=body, headers=token(user)) as response,
        ):
            assert response.status_code == 200
            ecpds.set_answer(user, revoked)
            closing = next(e for e in Stream(response).events() if e.name == "connection-closing")
            scrape = running.scrape()
    assert closing.data["cause"] == "access_revoked"
    name = "aviso_ecpds_access_decisions_total"
    assert scrape.value(name, outcome="allow") >= 1  # admitted, then possibly rechecked
    assert scrape.value(name, outcome="deny_destination") == 1
    assert scrape.value("aviso_ecpds_fetch_total", outcome="success") >= 2


# -- no _created series ---------------------------------------------------------------------


def test_no_created_series(server: Metered, client: httpx.Client) -> None:
    assert notify(client, unique_basin()).status_code == 200
    collect(client, REPLAY, {**gauge(unique_basin()), "from_id": "1"})
    text = server.scrape().text
    assert "aviso_notifications_total{" in text and "aviso_sse_connections_total{" in text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    assert not [name for name in names if name.endswith("_created")]


# -- the counters of aviso-py's own behaviours ------------------------------------


def test_history_gap_is_counted() -> None:
    document = with_changes(
        API_EXAMPLE,
        notification_backend={"kind": "in_memory", "in_memory": {"max_history_per_topic": 1}},
    )
    name = "aviso_sse_history_gaps_total"
    with (
        metered(document) as running,
        httpx.Client(base_url=running.url, timeout=DEFAULT_TIMEOUT) as http,
    ):
        assert running.scrape().value(name, route=REPLAY) == 0
        basin = unique_basin()
        for _ in range(2):
            assert notify(http, basin).status_code == 200
        events = collect(http, REPLAY, {**gauge(basin), "from_id": "1"})
        assert "replay-control/history_gap" in [e.kind for e in events]
        assert running.scrape().value(name, route=REPLAY) == 1
