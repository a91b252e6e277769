"""JetStream streams, messages and admin primitives against a real nats-server.

One nats-server and one ``aviso-server serve`` per module; each test writes to its own topic
bases, and streams are inspected directly with nats-py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js import api

from tests.host.backends.jetstream_support import (
    STREAM_TIMEOUT,
    WATCH,
    Aviso,
    Watch,
    assert_storage_failed,
    aviso_serving,
    document,
    ids,
    notify,
    notify_ok,
    replay,
    stored_messages,
    stream_config,
    stream_state,
    unique,
    watching,
    with_jetstream,
)
from tests.support.nats import NatsServer

POLYGON_RING = "(47.0,8.0,47.6,8.0,47.6,8.9,47.0,8.9,47.0,8.0)"
DAY = 86400


def keyed(base: str, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A schema whose topic is ``<base>.<n>``."""
    schema: dict[str, Any] = {
        "payload": {"required": False},
        "topic": {"base": base, "key_order": ["n"]},
        "identifier": {"n": {"type": "StringHandler", "required": True}},
    }
    if policy is not None:
        schema["storage_policy"] = policy
    return schema


def spatial(base: str) -> dict[str, Any]:
    return {
        "payload": {"required": False},
        "topic": {"base": base, "key_order": ["date", "time"]},
        "identifier": {
            "date": {"type": "DateHandler", "required": False},
            "time": {"type": "TimeHandler", "required": False},
            "polygon": {"type": "PolygonHandler", "required": True},
        },
    }


SCHEMAS: dict[str, Any] = {
    "test_polygon": spatial("polygon"),
    "storm": spatial("storm"),
    "plain": keyed("plain"),
    "dups": keyed("dups", {"allow_duplicates": True}),
    "nodups": keyed("nodups", {"allow_duplicates": False}),
    "packed": keyed(
        "packed",
        {
            "compression": True,
            "retention_time": "1h",
            "max_size": "2Mi",
            "max_messages": 250,
            "allow_duplicates": True,
        },
    ),
    "unpacked": keyed("unpacked", {"compression": False}),
    "dissemination": {
        "payload": {"required": False},
        "topic": {"base": "diss", "key_order": ["destination", "n"]},
        "identifier": {
            "destination": {"type": "StringHandler", "required": True},
            "n": {"type": "StringHandler", "required": True},
        },
    },
}
# Backend-wide defaults, overridden by the schema values of ``packed``.
BACKEND_DEFAULTS = {"max_messages": 100000, "max_bytes": 50000000, "retention_time": "30d"}


@pytest.fixture(scope="module")
def aviso(module_nats: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Aviso]:
    config = document(module_nats.url, jetstream=BACKEND_DEFAULTS, schemas=SCHEMAS)
    with aviso_serving(tmp_path_factory.mktemp("aviso"), config) as server:
        yield server


@pytest.fixture
def client(aviso: Aviso) -> Iterator[httpx.Client]:
    with aviso.client() as http:
        yield http


def stream_names(url: str) -> set[str]:
    async def names(js: Any) -> set[str]:
        return {info.config.name for info in await js.streams_info()}

    return with_jetstream(url, names)


# -- stream creation --------------------------------------------------------------------


def test_first_publish_creates_stream_polygon_bound_to_polygon_subjects(
    module_nats: NatsServer, client: httpx.Client
) -> None:
    assert stream_config(module_nats.url, "POLYGON") is None
    identifier = {"date": "2026-04-02", "time": "12", "polygon": POLYGON_RING}
    notify_ok(client, "test_polygon", identifier, {"cell": "A17"})

    config = stream_config(module_nats.url, "POLYGON")
    assert config is not None
    assert config.name == "POLYGON"
    assert config.subjects == ["polygon.>"]
    assert "TEST_POLYGON" not in stream_names(module_nats.url)
    assert [m.subject for m in stored_messages(module_nats.url, "POLYGON")] == [
        "polygon.20260402.1200"
    ]


# -- stream settings --------------------------------------------------------------------


@pytest.fixture(scope="module")
def policy_streams(module_nats: NatsServer, aviso: Aviso) -> dict[str, api.StreamConfig]:
    """One notification to each policy schema, then every stream's configuration."""
    with aviso.client() as http:
        for event_type in ("plain", "dups", "nodups", "packed", "unpacked"):
            notify_ok(http, event_type, {"n": "1"})
    configs = {}
    for base in ("plain", "dups", "nodups", "packed", "unpacked"):
        config = stream_config(module_nats.url, base.upper())
        assert config is not None, base
        assert config.subjects == [f"{base}.>"]
        configs[base] = config
    return configs


@pytest.mark.parametrize(("base", "expected"), [("plain", 1), ("dups", -1), ("nodups", 1)])
def test_allow_duplicates_sets_max_msgs_per_subject(
    policy_streams: dict[str, api.StreamConfig], base: str, expected: int
) -> None:
    assert policy_streams[base].max_msgs_per_subject == expected


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("packed", api.StoreCompression.S2),
        ("unpacked", api.StoreCompression.NONE),
        ("plain", api.StoreCompression.NONE),
    ],
)
def test_compression_flag_sets_stream_compression(
    policy_streams: dict[str, api.StreamConfig], base: str, expected: api.StoreCompression
) -> None:
    assert policy_streams[base].compression == expected


def test_schema_limits_override_backend_defaults(
    policy_streams: dict[str, api.StreamConfig],
) -> None:
    packed = policy_streams["packed"]
    assert (packed.max_age, packed.max_bytes, packed.max_msgs) == (3600, 2097152, 250)
    plain = policy_streams["plain"]
    assert (plain.max_age, plain.max_bytes, plain.max_msgs) == (30 * DAY, 50000000, 100000)
    for config in policy_streams.values():
        assert config.storage == api.StorageType.FILE
        assert config.retention == api.RetentionPolicy.LIMITS
        assert config.discard == api.DiscardPolicy.OLD


def test_default_max_msgs_per_subject_keeps_only_the_newest_per_subject(
    client: httpx.Client,
) -> None:
    """By default a subject that received three notifications replays as one."""
    n = unique("s")
    for payload in ("first", "second", "third"):
        notify_ok(client, "plain", {"n": n}, payload)
    replayed = replay(client, "plain", {"n": n})
    assert [event["data"]["payload"] for event in replayed] == ["third"]
    for payload in ("first", "second", "third"):
        notify_ok(client, "dups", {"n": n}, payload)
    replayed = replay(client, "dups", {"n": n})
    assert [event["data"]["payload"] for event in replayed] == ["first", "second", "third"]


def test_backend_settings_map_onto_storage_retention_discard_and_replicas(
    module_nats: NatsServer, tmp_path: Path
) -> None:
    """Per-schema settings: storage ← storage_type, retention ← retention_policy,
    discard ← discard_policy, num_replicas ← replicas."""
    options = {
        "storage_type": "memory",
        "retention_policy": "interest",
        "discard_policy": "new",
        "replicas": 1,
    }
    event_type = unique("mem")
    config = document(module_nats.url, jetstream=options)
    with aviso_serving(tmp_path, config) as server, server.client() as http:
        notify_ok(http, event_type, {"n": "1"})
    config = stream_config(module_nats.url, event_type.upper())
    assert config is not None
    assert config.storage == api.StorageType.MEMORY
    assert config.retention == api.RetentionPolicy.INTEREST
    assert config.discard == api.DiscardPolicy.NEW
    assert config.num_replicas == 1


def test_a_publish_the_broker_refuses_is_answered_500_not_200(
    module_nats: NatsServer, tmp_path: Path
) -> None:
    """discard_policy new + max_messages 2: the third notify is refused by JetStream."""
    base = unique("capped")
    schemas = {"capped": keyed(base, {"max_messages": 2, "allow_duplicates": True})}
    config = document(module_nats.url, jetstream={"discard_policy": "new"}, schemas=schemas)
    with aviso_serving(tmp_path, config) as server, server.client() as http:
        notify_ok(http, "capped", {"n": "a"})
        notify_ok(http, "capped", {"n": "b"})
        body = assert_storage_failed(notify(http, "capped", {"n": "c"}))
        # The broker's reason is logged, not answered.
        assert body["details"] == "Failed to store notification", body
        assert "maximum messages exceeded" in server.log()
        assert ids(replay(http, "capped", {"n": "*"})) == ["capped@1", "capped@2"]


def test_replay_and_watch_recreate_a_stream_deleted_outside_aviso(
    module_nats: NatsServer, client: httpx.Client
) -> None:
    event_type = unique("rm")
    notify_ok(client, event_type, {"n": 1})
    assert replay(client, event_type, {"n": "*"}) != []

    async def delete(js: Any) -> bool:
        return await js.delete_stream(event_type.upper())

    assert with_jetstream(module_nats.url, delete)
    assert replay(client, event_type, {"n": "*"}) == []
    with watching(client, event_type, {"n": "*"}):
        pass
    assert stream_config(module_nats.url, event_type.upper()) is not None


def test_a_notify_recreates_a_stream_deleted_outside_aviso(
    module_nats: NatsServer, client: httpx.Client
) -> None:
    """The publish path's cached stream name is dropped when JetStream has no stream for
    the subject: the notify recreates it and is stored, and so is the next one."""
    event_type = unique("rmpub")
    notify_ok(client, event_type, {"n": 1})

    async def delete(js: Any) -> bool:
        return await js.delete_stream(event_type.upper())

    assert with_jetstream(module_nats.url, delete)
    notify_ok(client, event_type, {"n": 2})
    notify_ok(client, event_type, {"n": 3})
    assert stream_state(module_nats.url, event_type.upper()).messages == 2
    assert len(replay(client, event_type, {"n": "*"})) == 2


# -- reconciling a changed stream -------------------------------------------------------


def test_changed_retention_reconciles_stream_on_next_publish_keeping_messages(
    module_nats: NatsServer, tmp_path: Path
) -> None:
    base = unique("recon")
    name = base.upper()

    def config(policy: dict[str, Any]) -> dict[str, Any]:
        return document(module_nats.url, schemas={"recon": keyed(base, policy)})

    with aviso_serving(tmp_path, config({"retention_time": "1h"})) as first, first.client() as http:
        for n in range(3):
            notify_ok(http, "recon", {"n": str(n)}, {"n": n})
        before = ids(replay(http, "recon", {"n": "*"}))
    assert len(before) == 3
    settings = stream_config(module_nats.url, name)
    assert settings is not None and settings.max_age == 3600

    changed = config({"retention_time": "2h", "max_messages": 500})
    with aviso_serving(tmp_path, changed) as second, second.client() as http:
        notify_ok(http, "recon", {"n": "3"}, {"n": 3})
        settings = stream_config(module_nats.url, name)
        assert settings is not None
        assert (settings.max_age, settings.max_msgs) == (7200, 500)
        assert stream_state(module_nats.url, name).messages == 4
        after = ids(replay(http, "recon", {"n": "*"}))
    assert after[:3] == before
    assert after == [f"recon@{sequence}" for sequence in range(1, 5)]


# -- stored body and headers ------------------------------------------------------------


def test_stored_body_is_canonical_payload_and_polygon_adds_spatial_headers(
    module_nats: NatsServer, client: httpx.Client
) -> None:
    date = "2026-05-01"
    notify_ok(
        client,
        "storm",
        {"date": date, "time": "0", "polygon": POLYGON_RING},
        {"b": 2, "a": [1, {"z": 1, "y": 2}], "c": None},
    )
    notify_ok(client, "storm", {"date": date, "time": "6", "polygon": POLYGON_RING})
    notify_ok(
        client, "storm", {"date": date, "time": "12", "polygon": POLYGON_RING}, "plain string"
    )
    notify_ok(client, "plain", {"n": unique("h")}, {"k": "v"})

    storm = {m.subject: m for m in stored_messages(module_nats.url, "STORM")}
    assert storm["storm.20260501.0000"].body == b'{"a":[1,{"y":2,"z":1}],"b":2,"c":null}'
    assert storm["storm.20260501.0600"].body == b"null"
    assert storm["storm.20260501.1200"].body == b'"plain string"'

    replayed = replay(client, "storm", {"date": date, "point": "47.3,8.5"})
    assert len(replayed) == 3
    for event in replayed:
        headers = storm[f"storm.20260501.{event['data']['identifier']['time']}"].headers
        # The header keeps the producer's text; the CloudEvent shows the array (0.11+; this
        # compared the two as equal strings before).
        assert headers["spatial_geometry"] == POLYGON_RING
        assert event["data"]["identifier"]["polygon"] == [
            [47.0, 8.0],
            [47.6, 8.0],
            [47.6, 8.9],
            [47.0, 8.9],
            [47.0, 8.0],
        ]
        assert "polygon" not in json.loads(headers["identifier"])  # stored once, apart
        bbox = [float(value) for value in headers["spatial_bbox"].split(",")]
        assert bbox == [47.0, 8.0, 47.6, 8.9]

    plain = stored_messages(module_nats.url, "PLAIN")[-1]
    assert plain.body == b'{"k":"v"}'
    assert not {"spatial_bbox", "spatial_geometry"} & set(plain.headers), plain.headers


# -- sequences and replay paging --------------------------------------------------------


def test_cloudevent_sequence_is_the_stream_sequence_starting_at_1(
    module_nats: NatsServer, client: httpx.Client
) -> None:
    event_type = unique("seq")
    for n in range(3):
        notify_ok(client, event_type, {"n": n}, {"n": n})
    replayed = replay(client, event_type, {"n": "*"})
    assert [event["sequence"] for event in replayed] == [1, 2, 3]
    assert ids(replayed) == [f"{event_type}@{n}" for n in (1, 2, 3)]

    stored = {m.sequence: m for m in stored_messages(module_nats.url, event_type.upper())}
    assert sorted(stored) == [1, 2, 3]
    for event in replayed:
        message = stored[event["sequence"]]
        assert message.subject == f"{event_type}.{event['data']['identifier']['n']}"
        assert json.loads(message.body) == event["data"]["payload"]

    assert [e["sequence"] for e in replay(client, event_type, {"n": "*"}, from_id="2")] == [2, 3]
    assert replay(client, event_type, {"n": "*"}, from_id="4") == []


def test_replay_pages_with_a_batch_delay(module_nats: NatsServer, tmp_path: Path) -> None:
    config = document(module_nats.url)
    config["watch_endpoint"].update(replay_batch_size=4, replay_batch_delay_ms=1)
    event_type = unique("page")
    with aviso_serving(tmp_path, config) as server, server.client() as http:
        for n in range(120):  # 30 pages, 29 pauses: each pause may trip the bug
            notify_ok(http, event_type, {"n": n})
        replayed = replay(http, event_type, {"n": "*"})
        assert [event["sequence"] for event in replayed] == list(range(1, 121))


def test_replay_pages_through_more_than_one_batch(client: httpx.Client) -> None:
    """replay_batch_size 100: 250 notifications come back in three pages, in order."""
    event_type = unique("pages")
    for n in range(250):
        notify_ok(client, event_type, {"n": n})
    replayed = replay(client, event_type, {"n": "*"})
    assert [event["sequence"] for event in replayed] == list(range(1, 251))
    assert [e["sequence"] for e in replay(client, event_type, {"n": "*"}, from_id="101")] == (
        list(range(101, 251))
    )


# -- from_date --------------------------------------------------------------------------


def _ce_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_from_date_excludes_messages_stored_before_it(client: httpx.Client) -> None:
    event_type = unique("date")
    notify_ok(client, event_type, {"n": "early"})
    notify_ok(client, event_type, {"n": "late"})
    early, late = replay(client, event_type, {"n": "*"})
    t_early, t_late = _ce_time(early["time"]), _ce_time(late["time"])
    assert t_early + timedelta(microseconds=2) < t_late, (early["time"], late["time"])

    between = (t_early + (t_late - t_early) / 2).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert ids(replay(client, event_type, {"n": "*"}, from_date=between)) == [late["id"]]
    before = (t_early - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert ids(replay(client, event_type, {"n": "*"}, from_date=before)) == [
        early["id"],
        late["id"],
    ]
    after = (t_late + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert replay(client, event_type, {"n": "*"}, from_date=after) == []


def test_from_date_equal_to_a_notifications_time_includes_it(client: httpx.Client) -> None:
    event_type = unique("incl")
    for n in range(16):  # each one has about even odds of being rounded up
        notify_ok(client, event_type, {"n": n})
    replayed = replay(client, event_type, {"n": "*"})
    assert len(replayed) == 16
    excluded = [
        (event["id"], event["time"])
        for event in replayed
        if ids(replay(client, event_type, {"n": "*"}, from_date=event["time"]))[:1] != [event["id"]]
    ]
    assert excluded == []


# -- concurrent watches -----------------------------------------------------------------


def test_two_concurrent_watches_each_receive_every_notification(
    aviso: Aviso, client: httpx.Client
) -> None:
    event_type = unique("fan")
    with (
        aviso.client() as first_client,
        aviso.client() as second_client,
        watching(first_client, event_type, {"n": "*"}) as first,
        watching(second_client, event_type, {"n": "*"}) as second,
    ):
        for n in range(6):
            notify_ok(client, event_type, {"n": n})
        expected = [f"{event_type}@{n}" for n in range(1, 7)]
        assert ids(first.collect(6)) == expected
        assert ids(second.collect(6)) == expected


def test_watch_from_id_replays_then_goes_live_without_gap_or_duplicate(
    aviso: Aviso, client: httpx.Client
) -> None:
    """The replay/live seam on JetStream, with notifications arriving during the replay."""
    event_type = unique("seam")
    for n in range(20):
        notify_ok(client, event_type, {"n": n})

    def publish_more() -> None:
        with aviso.client() as http:
            for n in range(20, 80):
                notify_ok(http, event_type, {"n": n})

    publisher = threading.Thread(target=publish_more, daemon=True)
    body = {"event_type": event_type, "identifier": {"n": "*"}, "from_id": "1"}
    sequences: list[int] = []
    with (
        aviso.client() as watch_http,
        watch_http.stream("POST", WATCH, content=json.dumps(body), timeout=STREAM_TIMEOUT) as resp,
    ):
        assert resp.status_code == 200, resp.read()
        publisher.start()
        try:
            watch = Watch(resp)
            deadline = time.monotonic() + 30
            while len(sequences) < 80:
                assert time.monotonic() < deadline, f"timed out with {len(sequences)}"
                event = watch.next()
                assert event is not None and event.name != "error", event
                if event.name in ("replay", "live-notification") and "sequence" in event.data:
                    sequences.append(event.data["sequence"])
        finally:
            publisher.join(30)
    assert sequences == list(range(1, 81))


# -- admin primitives on JetStream ------------------------------------------------------


DELETED, NOT_FOUND = "Notification deleted", "Notification not found"


def _delete(client: httpx.Client, notification_id: str) -> httpx.Response:
    return client.delete(f"/api/v1/admin/notification/{notification_id}")


def _assert_admin(
    response: httpx.Response, status: int, message: str, notification_id: str
) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == ["success", "message", "notification_id", "request_id"], body
    assert body["success"] is (status == 200), body
    assert body["message"] == message, body
    assert body["notification_id"] == notification_id, body
    assert body["request_id"] == response.headers["x-request-id"]


def test_unused_sequence_is_not_found(client: httpx.Client) -> None:
    notify_ok(client, "dissemination", {"destination": unique("d"), "n": "1"})
    for notification_id in ("test_polygon@999999999", "dissemination@999999999"):
        _assert_admin(
            _delete(client, notification_id), 404, "Notification not found", notification_id
        )


def test_delete_by_replayed_id_removes_it_from_replay(client: httpx.Client) -> None:
    event_type = unique("del")
    for n in range(3):
        notify_ok(client, event_type, {"n": n})
    replayed = ids(replay(client, event_type, {"n": "*"}))
    assert replayed == [f"{event_type}@{n}" for n in (1, 2, 3)]

    victim = replayed[1]
    _assert_admin(_delete(client, victim), 200, "Notification deleted", victim)
    assert ids(replay(client, event_type, {"n": "*"})) == [replayed[0], replayed[2]]

    notify_ok(client, event_type, {"n": 3})  # sequences are never reused after a delete
    assert ids(replay(client, event_type, {"n": "*"}))[-1] == f"{event_type}@4"


def test_repeating_a_delete_is_not_found(client: httpx.Client) -> None:
    event_type = unique("redel")
    for n in range(3):
        notify_ok(client, event_type, {"n": n})
    victim = f"{event_type}@2"
    _assert_admin(_delete(client, victim), 200, "Notification deleted", victim)
    _assert_admin(_delete(client, victim), 404, "Notification not found", victim)


def _two_dissemination_sequences(client: httpx.Client) -> tuple[str, int, int]:
    destination = unique("d")
    notify_ok(client, "dissemination", {"destination": destination, "n": "1"})
    notify_ok(client, "dissemination", {"destination": destination, "n": "2"})
    first, second = (
        event["sequence"]
        for event in replay(client, "dissemination", {"destination": destination, "n": "*"})
    )
    return destination, first, second


def test_event_type_alias_and_base_address_the_same_message(
    client: httpx.Client,
) -> None:
    destination, first, second = _two_dissemination_sequences(client)
    everything = {"destination": destination, "n": "*"}

    _assert_admin(_delete(client, f"diss@{first}"), 200, DELETED, f"diss@{first}")
    assert ids(replay(client, "dissemination", everything)) == [f"dissemination@{second}"]
    _assert_admin(
        _delete(client, f"DISSEMINATION@{second}"), 200, DELETED, f"DISSEMINATION@{second}"
    )
    assert replay(client, "dissemination", everything) == []


def test_a_message_deleted_through_one_form_is_not_found_through_the_other(
    client: httpx.Client,
) -> None:
    _, first, _ = _two_dissemination_sequences(client)
    _assert_admin(_delete(client, f"dissemination@{first}"), 200, DELETED, f"dissemination@{first}")
    _assert_admin(_delete(client, f"DISS@{first}"), 404, NOT_FOUND, f"DISS@{first}")


def test_wipe_of_unknown_stream_is_404(module_nats: NatsServer, client: httpx.Client) -> None:
    # 404 (the reference, and this suite before, answered 500).
    unknown = unique("NOSUCH").upper()
    response = client.request("DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": unknown})
    assert response.status_code == 404, response.text
    body = response.json()
    assert body["success"] is False, body
    assert body["message"] == "Stream not found", body
    assert body["request_id"] == response.headers["x-request-id"]
    assert unknown not in stream_names(module_nats.url)

    # A known stream wipes fine and keeps working (the 404 is about the name only).
    event_type = unique("wipe")
    notify_ok(client, event_type, {"n": 1})
    name = event_type.upper()
    response = client.request("DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": name})
    assert response.status_code == 200, response.text
    assert response.json()["message"] == f"Successfully wiped stream: {name}"
    assert replay(client, event_type, {"n": "*"}) == []
    notify_ok(client, event_type, {"n": 2})
    assert ids(replay(client, event_type, {"n": "*"})) == [f"{event_type}@2"]


# -- aviso-server 0.13: storage type --------------------------------------------------------


def test_an_existing_stream_of_another_storage_type_is_an_error_not_a_recreate(
    module_nats: NatsServer, tmp_path: Path
) -> None:
    """Recreating the stream to switch storage would lose its messages: notify fails, the
    log says why, and the stream keeps its storage and every message."""
    base = unique("storage")
    name = base.upper()

    def config(storage_type: str) -> dict[str, Any]:
        return document(
            module_nats.url,
            jetstream={"storage_type": storage_type},
            schemas={"stored": keyed(base)},
        )

    with aviso_serving(tmp_path, config("file")) as first, first.client() as http:
        notify_ok(http, "stored", {"n": "1"}, {"n": 1})
    with aviso_serving(tmp_path, config("memory")) as second, second.client() as http:
        assert_storage_failed(notify(http, "stored", {"n": "2"}, {"n": 2}))
        log = second.log()
    assert f"stream {name} exists with storage file" in log
    assert "storage_type is memory" in log
    settings = stream_config(module_nats.url, name)
    assert settings is not None and settings.storage == api.StorageType.FILE
    assert stream_state(module_nats.url, name).messages == 1
