"""``/console`` in a real headless Chromium against a real in-memory aviso-server.

Notifications are published with plain HTTP (as curl would) and awaited in the page with
Playwright's ``expect`` and a generous timeout; nothing sleeps and nothing is timed.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import queue
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import yaml

if importlib.util.find_spec("playwright") is None and not os.environ.get("CI"):
    pytest.skip("playwright is not installed (pip install -e '.[test]')", allow_module_level=True)

from playwright.sync_api import Page, expect

from aviso_host.config.loader import EXAMPLE_CONFIG
from tests.console.browser_support import screenshot
from tests.support.loopback import Handler
from tests.support.loopback import serve as serve_loopback
from tests.support.server import RunningServer, running_server
from tests.support.tokens import SECRET, mint

CONSOLE_CONFIG: dict[str, Any] = yaml.safe_load(
    """
application:
  host: 127.0.0.1
  port: 0
  base_url: "https://aviso.example.org"
notification_backend:
  kind: in_memory
notification_schema:
  mars:
    payload: { required: false }
    topic: { base: "mars", key_order: ["class", "date", "step"] }
    identifier:
      class: { type: EnumHandler, values: ["od", "rd"], required: true }
      date:  { type: DateHandler, required: false }
      step:  { type: IntHandler, range: [0, 360], required: false }
  storm_cell:
    payload: { required: true }
    topic: { base: "storm", key_order: ["date"] }
    identifier:
      date:    { type: DateHandler, required: false }
      polygon: { type: PolygonHandler, required: true }
"""
)

WAIT_SECONDS = 30.0
"""How long a test waits for a delivery or a state it expects (a bound, never a margin)."""

ALL_OPERATORS = ["between", "eq", "gt", "gte", "in", "lt", "lte"]


@contextmanager
def serve(**sections: dict[str, Any]) -> Iterator[RunningServer]:
    document = copy.deepcopy(CONSOLE_CONFIG)
    document.update(sections)
    with running_server(document) as server:
        yield server


@pytest.fixture
def server() -> Iterator[RunningServer]:
    with serve() as running:
        yield running


def publish(server: RunningServer, identifier: dict[str, Any], payload: Any = None) -> None:
    body = {"event_type": "mars", "identifier": identifier, "payload": payload}
    response = httpx.post(f"{server.url}/api/v1/notification", json=body, timeout=30)
    assert response.status_code == 200, response.text


def control(page: Page, kind: str) -> Any:
    return page.locator(f'#events li.control[data-kind="{kind}"]')


def notifications(page: Page) -> Any:
    return page.locator("#events li.notification")


def test_the_form_follows_the_schema(page: Page, server: RunningServer) -> None:
    page.goto(f"{server.url}/console")
    expect(page.locator("body[data-ready=true]")).to_have_count(1)
    expect(page.locator("#event-type option")).to_have_text(["mars", "storm_cell"])

    page.select_option("#event-type", "mars")
    # An enum is a choice among its values; optional fields may match anything.
    expect(page.locator("#field-class option")).to_have_text(["choose…", "od", "rd"])
    assert page.locator("#op-class option").evaluate_all("o => o.map(x => x.value)") == [
        "",
        "eq",
        "in",
    ]
    # Integer constraints come from the handler's declared operators.
    assert page.locator("#op-step option").evaluate_all("o => o.map(x => x.value)") == [
        "",
        *ALL_OPERATORS,
    ]
    expect(page.locator("#field-step")).to_have_attribute("placeholder", "0…360")
    expect(page.locator("#field-date")).to_have_attribute("placeholder", "YYYYMMDD or YYYY-MM-DD")
    expect(page.locator("#op-date")).to_have_count(0)  # dates take plain values only
    expect(page.locator("label[for=field-class]")).to_contain_text("enum, required")
    screenshot(page, "form-mars")

    # Keyboard only: Enter in a field starts a watch, and the URL then describes it.
    page.select_option("#field-class", "od")
    page.focus("#field-class")
    page.keyboard.press("Tab")
    expect(page.locator("#field-date")).to_be_focused()
    page.keyboard.type("2026-01-01")
    page.keyboard.press("Enter")
    expect(control(page, "connection_established")).to_have_count(1)
    assert "class=od&date=2026-01-01" in page.url
    assert page.url.endswith("&watch=1")
    page.click("#stop")
    expect(page.locator("#state")).to_have_text("stopped")

    page.select_option("#event-type", "storm_cell")
    expect(page.locator("textarea#field-polygon")).to_be_visible()
    expect(page.locator("#field-point")).to_be_visible()
    expect(page.locator("#field-class")).to_have_count(0)
    expect(page.locator("#schema-note")).to_have_text("A payload is required.")
    assert "event_type=storm_cell" in page.url
    screenshot(page, "form-storm-cell")

    # A phone: one column, nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    form_box = page.locator("#query").bounding_box()
    events_box = page.locator("#events").bounding_box()
    assert form_box is not None and events_box is not None
    assert events_box["y"] >= form_box["y"] + form_box["height"]
    screenshot(page, "form-phone")


def test_a_watch_started_from_the_url_shows_a_notification_published_afterwards(
    page: Page, server: RunningServer
) -> None:
    page.goto(f"{server.url}/console?event_type=mars&class=od&step=gte:6&watch=1")
    expect(control(page, "connection_established")).to_have_count(1)
    expect(page.locator("#op-step")).to_have_value("gte")
    expect(page.locator("#field-step")).to_have_value("6")
    expect(page.locator("#state")).to_have_text("watching live")

    publish(server, {"class": "od", "date": "20260101", "step": "3"}, {"note": "too early"})
    publish(server, {"class": "rd", "date": "20260101", "step": "12"}, {"note": "other class"})
    publish(server, {"class": "od", "date": "20260101", "step": "12"}, {"note": "hello"})

    # Only the matching notification arrives: the third of its stream.
    expect(notifications(page)).to_have_count(1)
    row = notifications(page).first
    expect(row).to_have_attribute("data-sequence", "3")
    expect(row).to_contain_text("class=od date=20260101 step=12")
    expect(row).to_contain_text('{"note":"hello"}')
    expect(page.locator("#rate")).to_contain_text("1 notification (0 replayed, 1 live)")
    row.get_by_role("button", name="JSON").click()
    expect(row.locator("pre")).to_contain_text('"id": "mars@3"')
    screenshot(page, "watch-live")


def test_publish_from_the_console_reaches_its_own_watch(page: Page, server: RunningServer) -> None:
    page.goto(f"{server.url}/console?event_type=mars&class=od&date=20260101&watch=1")
    expect(control(page, "connection_established")).to_have_count(1)
    page.click("#publish-panel summary")
    # Its own identifier, prefilled from the subscription's values.
    expect(page.locator("#publish-class")).to_have_value("od")
    expect(page.locator("#publish-date")).to_have_value("20260101")
    page.fill("#payload", '{"path": "/data/1.grib"}')
    page.click("#publish")
    # A notify names every field: the server says which one is missing.
    expect(page.locator("#error")).to_contain_text(
        "400 INVALID_NOTIFICATION_REQUEST Required field 'step' missing for notify operation"
    )
    page.fill("#publish-step", "12")
    page.click("#publish")
    expect(page.locator("#publish-result")).to_contain_text("Published")
    expect(page.locator("#error")).to_be_hidden()
    expect(notifications(page)).to_have_count(1)
    expect(notifications(page).first).to_contain_text('{"path":"/data/1.grib"}')
    # The running watch's own fields were left as they were.
    expect(page.locator("#field-step")).to_have_value("")
    assert "step" not in page.url
    screenshot(page, "publish")


def test_a_new_stream_starts_its_own_event_list(page: Page, server: RunningServer) -> None:
    for step in (1, 2):
        publish(server, {"class": "od", "date": "20260101", "step": str(step)})
    publish(server, {"class": "rd", "date": "20260101", "step": "7"})
    page.goto(f"{server.url}/console?event_type=mars&class=od&from_id=1&replay=1")
    expect(page.locator("#state")).to_have_text("replay complete")
    expect(notifications(page)).to_have_count(2)
    page.select_option("#field-class", "rd")
    page.click("#replay")
    expect(control(page, "replay_completed")).to_contain_text("1 replayed")
    # Only the new stream's events, as the counter says.
    assert notifications(page).evaluate_all("rows => rows.map(r => r.dataset.sequence)") == ["3"]
    expect(page.locator("#rate")).to_contain_text("1 notification (1 replayed, 0 live)")
    expect(control(page, "replay_started")).to_have_count(1)


def test_the_readme_picture_with_the_default_configuration(page: Page) -> None:
    """docs/console.png is this test's screenshot (test-artifacts/console/readme.png): the
    README's watch, on the configuration ``aviso-server serve`` reads by default."""
    document = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    document["application"]["port"] = 0
    with running_server(document) as server:
        page.goto(f"{server.url}/console?event_type=mars&class=od&step=gte:6&watch=1")
        expect(control(page, "connection_established")).to_have_count(1)
        identifier = {
            **{"class": "od", "expver": "1", "domain": "g", "date": "2026-04-02"},
            **{"time": "12", "stream": "enfo", "step": 12},
        }
        body = {
            "event_type": "mars",
            "identifier": identifier,
            "payload": {"path": "/data/od/enfo/20260402/12/12.grib"},
        }
        answer = httpx.post(f"{server.url}/api/v1/notification", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        row = notifications(page).first
        expect(row).to_contain_text("step=12")
        row.get_by_role("button", name="JSON").click()
        expect(row.locator("pre")).to_contain_text('"id": "mars@1"')
        screenshot(page, "readme")


def test_a_spatial_watch_by_point(page: Page, server: RunningServer) -> None:
    page.goto(f"{server.url}/console?event_type=storm_cell&point=47.3,8.5&watch=1")
    expect(control(page, "connection_established")).to_have_count(1)
    expect(page.locator("#field-point")).to_have_value("47.3,8.5")
    cell = [[47.0, 8.0], [47.6, 8.0], [47.6, 8.9], [47.0, 8.9], [47.0, 8.0]]
    elsewhere = [[10.0, 10.0], [10.5, 10.0], [10.5, 10.5], [10.0, 10.0]]
    for polygon, name in ((elsewhere, "B2"), (cell, "A17")):
        body = {
            "event_type": "storm_cell",
            "identifier": {"date": "20260402", "polygon": polygon},
            "payload": {"cell": name},
        }
        response = httpx.post(f"{server.url}/api/v1/notification", json=body, timeout=30)
        assert response.status_code == 200, response.text
    expect(notifications(page)).to_have_count(1)
    expect(notifications(page).first).to_contain_text('{"cell":"A17"}')
    expect(notifications(page).first).to_contain_text("polygon=[[47,8],")


def test_a_replay_with_to_id_shows_exactly_the_bounded_history(
    page: Page, server: RunningServer
) -> None:
    for step in range(1, 6):
        publish(server, {"class": "od", "date": "20260101", "step": str(step)})

    page.goto(f"{server.url}/console?event_type=mars&class=od&from_id=2&to_id=4&replay=1")
    expect(control(page, "connection_closing")).to_contain_text("end_of_stream")
    expect(control(page, "replay_started")).to_contain_text("from 2 to 4")
    expect(control(page, "replay_completed")).to_contain_text("3 replayed")
    assert notifications(page).evaluate_all("rows => rows.map(r => r.dataset.sequence)") == [
        "2",
        "3",
        "4",
    ]
    kinds = page.locator("#events li.control").evaluate_all("rows => rows.map(r => r.dataset.kind)")
    assert kinds == ["replay_started", "replay_completed", "connection_closing"]
    expect(page.locator("#to_id")).to_have_value("4")
    expect(page.locator("#state")).to_have_text("replay complete")
    screenshot(page, "replay-bounded")


def test_a_replay_cut_by_the_history_limit_offers_to_continue(page: Page) -> None:
    with serve(watch_endpoint={"max_historical_notifications": 2}) as server:
        for step in range(1, 4):
            publish(server, {"class": "od", "date": "20260101", "step": str(step)})
        page.goto(f"{server.url}/console?event_type=mars&class=od&from_id=1&replay=1")
        limit = control(page, "notification_replay_limit_reached")
        expect(limit).to_contain_text("Historical replay limited to 2 messages")
        expect(control(page, "replay_completed")).to_have_count(0)
        screenshot(page, "replay-limit-reached")

        limit.get_by_role("button", name="Continue from_id 3").click()
        expect(page.locator("#state")).to_have_text("replay complete")
        # The continuation adds to the list: the whole history, each notification once.
        assert notifications(page).evaluate_all("rows => rows.map(r => r.dataset.sequence)") == [
            "1",
            "2",
            "3",
        ]
        assert "from_id=3" in page.url


def test_a_refused_filter_shows_the_servers_message(page: Page, server: RunningServer) -> None:
    expected = httpx.post(
        f"{server.url}/api/v1/watch",
        json={"event_type": "mars", "identifier": {"class": "od", "step": {"gte": "soon"}}},
        timeout=30,
    )
    assert expected.status_code == 400
    message = expected.json()["message"]

    page.goto(f"{server.url}/console?event_type=mars&class=od&step=gte:soon&watch=1")
    error = page.locator("#error")
    expect(error).to_be_visible()
    expect(error).to_have_text(f"400 INVALID_WATCH_REQUEST {message}")
    expect(page.locator("#state")).to_have_text("refused (400)")
    expect(notifications(page)).to_have_count(0)
    screenshot(page, "refused-filter")


def test_a_stream_closed_by_the_server_shows_the_reason(page: Page) -> None:
    with serve(watch_endpoint={"connection_max_duration_sec": 1}) as server:
        page.goto(f"{server.url}/console?event_type=mars&class=od&watch=1")
        closing = control(page, "connection_closing")
        expect(closing).to_contain_text("max_duration_reached: Connection reached maximum duration")
        expect(page.locator("#state")).to_have_text("closed by the server: max_duration_reached")
        screenshot(page, "closed-by-server")


def test_an_auth_enabled_server_asks_for_a_token(page: Page) -> None:
    schemas = copy.deepcopy(CONSOLE_CONFIG["notification_schema"])
    schemas["mars"]["auth"] = {"required": True}
    auth = {
        "enabled": True,
        "mode": "trusted_proxy",  # bearer tokens checked locally with jwt_secret
        "jwt_secret": SECRET,
        "admin_roles": {"localrealm": ["admin"]},
    }
    with serve(auth=auth, notification_schema=schemas) as server:
        page.goto(f"{server.url}/console?event_type=mars&class=od&watch=1")
        error = page.locator("#error")
        expect(error).to_have_text("401 UNAUTHORIZED Authentication is required for this stream")
        expect(page.locator("#auth")).to_have_attribute("open", "")
        expect(page.locator("#auth-token")).to_be_focused()
        screenshot(page, "auth-asks-for-token")
        # So does the subscriptions view, without taking the focus.
        expect(page.locator("#subscriptions-error")).to_contain_text("401 UNAUTHORIZED")

        token = mint("console-user")
        page.fill("#auth-token", token)
        page.click("#watch")
        expect(control(page, "connection_established")).to_have_count(1)
        expect(error).to_be_hidden()
        stored = page.evaluate("sessionStorage.getItem('aviso-console-credentials')")
        assert json.loads(stored)["token"] == token
        assert token not in page.url
        screenshot(page, "auth-watching")
        # The subscriptions view asks with the same credentials.
        page.click("#subscriptions-refresh")
        expect(page.locator("#subscriptions-status")).to_contain_text("0 subscription(s)")
        expect(page.locator("#subscriptions-error")).to_be_hidden()


def test_the_home_page_shows_live_status(page: Page, server: RunningServer) -> None:
    publish(server, {"class": "od", "date": "20260101", "step": "1"})
    page.goto(server.url + "/")
    expect(page.locator("#status-backend")).to_have_text("in_memory, ready")
    expect(page.locator("#status-rate")).to_contain_text("1 since start")
    screenshot(page, "home")
    page.get_by_role("link", name="Console").click()
    expect(page.locator("body[data-ready=true]")).to_have_count(1)
    expect(page.locator("#server-status")).to_contain_text("backend in_memory ready")


class FailingReceiver(Handler):
    """A webhook receiver on 127.0.0.1 answering every delivery with its owner's status."""

    def do_POST(self) -> None:
        owner: WebhookReceiver = self.server.owner  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers["Content-Length"]))
        owner.received.put(body)
        self.reply(owner.status, b"{}")


class WebhookReceiver:
    def __init__(self) -> None:
        self.status = 500
        self.received: queue.Queue[bytes] = queue.Queue()


def _subscription_when(server: RunningServer, name: str, done: Any) -> dict[str, Any]:
    """The subscription's state once ``done(state)`` holds, read again for at most
    ``WAIT_SECONDS`` (a state announces no change: it is polled)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        state: dict[str, Any] = httpx.get(
            f"{server.url}/api/v1/subscriptions/{name}", timeout=30
        ).json()
        if done(state):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never reached the expected state: {state}")
        time.sleep(0.05)


def test_subscriptions_view_shows_state_and_dead_letters_and_redrives(page: Page) -> None:
    owner = WebhookReceiver()
    subscriptions = {
        "webhook": {"allow_private_networks": True, "retry_schedule_seconds": [1]},
    }
    with (
        serve_loopback(FailingReceiver, owner) as url,
        serve(subscriptions=subscriptions) as server,
    ):
        pulled = {"event_type": "mars", "identifier": {"class": "rd"}}
        pushed = {
            "event_type": "mars",
            "identifier": {"class": "od"},
            "delivery": {"kind": "webhook", "url": f"{url}/hook"},
        }
        for name, body in (("pulled-rd", pulled), ("hook-od", pushed)):
            created = httpx.put(f"{server.url}/api/v1/subscriptions/{name}", json=body, timeout=30)
            assert created.status_code == 201, created.text
        publish(server, {"class": "od", "date": "20260101", "step": "6"})
        publish(server, {"class": "rd", "date": "20260101", "step": "6"})
        # Two attempts (the first and one retry a second later), both answered 500.
        for _ in range(2):
            owner.received.get(timeout=WAIT_SECONDS)
        _subscription_when(server, "hook-od", lambda s: s["deliveries"]["dead_lettered"] == 1)

        page.goto(f"{server.url}/console")
        pulled_row = page.locator('#subscriptions-list li[data-name="pulled-rd"]')
        hook_row = page.locator('#subscriptions-list li[data-name="hook-od"]')
        expect(pulled_row).to_contain_text("pull")
        expect(pulled_row.locator(".figures")).to_contain_text("pending1")
        expect(hook_row).to_contain_text("webhook")
        expect(hook_row.locator(".figures")).to_contain_text("cursor1")
        expect(hook_row.locator(".figures")).to_contain_text("dead-lettered1")
        expect(hook_row.locator(".last-error")).to_contain_text("attempt 2")
        expect(hook_row.locator(".dead-letters li")).to_have_count(1)
        expect(hook_row.locator('.dead-letters li[data-sequence="1"]')).to_contain_text(
            "2 attempt(s)"
        )
        screenshot(page, "subscriptions-dead-letter")

        owner.status = 204
        hook_row.get_by_role("button", name="Redrive").click()
        expect(page.locator("#subscriptions-status")).to_have_text(
            "1 dead letter(s) of hook-od redriven."
        )
        redriven = json.loads(owner.received.get(timeout=WAIT_SECONDS))
        assert redriven["data"]["identifier"]["class"] == "od"
        _subscription_when(server, "hook-od", lambda s: s["deliveries"]["delivered"] == 1)
        page.click("#subscriptions-refresh")
        expect(hook_row.locator(".figures")).to_contain_text("delivered1")
        expect(hook_row.locator(".dead-letters li")).to_have_count(0)
        expect(hook_row.get_by_role("button", name="Redrive")).to_be_disabled()
        screenshot(page, "subscriptions-redriven")
