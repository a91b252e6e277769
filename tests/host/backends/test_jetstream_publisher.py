"""The JetStream backend's lean publish (``publisher.py``) against nats-py's ``js.publish``
on a real nats-server: the same stored message, headers, sequence and errors."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping

import pytest
from nats.errors import BadSubjectError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError

from aviso_builtins.backends.jetstream.backend import RequestLost, _fail_requests_in_flight
from aviso_builtins.backends.jetstream.publisher import (
    PublishingClient,
    acknowledged_sequence,
    dropped_as_duplicate,
    message_headers,
)
from tests.support.nats import NatsServer

HOSTILE_METADATA = {
    "Aviso-Note": "  padded id\r\nInjected: yes  ",
    " Aviso-Actor ": "caf\u00e9 \u2603",
    "": "an empty key is skipped",
}


def run_with(
    nats_url: str, scenario: Callable[[PublishingClient, JetStreamContext, str], Awaitable[None]]
) -> None:
    """``scenario`` with a connected client and a fresh stream ``<base>.>`` named ``<BASE>``."""

    async def run() -> None:
        client = PublishingClient()
        await client.connect(nats_url, allow_reconnect=False)
        try:
            await client.listen_for_acks()
            js = client.jetstream()
            base = f"pub{uuid.uuid4().hex[:10]}"
            await js.add_stream(name=base.upper(), subjects=[f"{base}.>"])
            await scenario(client, js, base)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_a_publish_is_stored_as_js_publish_stores_it(module_nats: NatsServer) -> None:
    """Hostile metadata too: whichever nats-py encodes it (older releases send a CR/LF in a
    header value as it is), a value cannot add a header of its own, and a non-ASCII value
    reads back as it was (nats-py before 2.15 dropped the headers of such a message)."""

    async def scenario(client: PublishingClient, js: JetStreamContext, base: str) -> None:
        stream = base.upper()
        reference = await js.publish(
            f"{base}.a", b"payload", stream=stream, headers={"Aviso-Note": "note"}
        )
        sequence = await client.publish_acked(
            f"{base}.b", b"payload", message_headers({"Aviso-Note": "note"}, stream), 5.0
        )
        assert sequence == reference.seq + 1
        theirs = await js.get_msg(stream, reference.seq)
        ours = await js.get_msg(stream, sequence)
        assert (ours.subject, ours.data) == (f"{base}.b", b"payload")
        assert ours.headers == theirs.headers

        await client.publish_acked(
            f"{base}.c", b"payload", message_headers(HOSTILE_METADATA, stream), 5.0
        )
        # Read as the live feeds and replays read it: from a consumer.
        consumer = await js.subscribe(f"{base}.c", stream=stream, ordered_consumer=True)
        hostile = await consumer.next_msg(timeout=5)
        await consumer.unsubscribe()
        assert hostile.headers == {
            "Aviso-Note": "padded id  Injected: yes",
            "Aviso-Actor": "caf\u00e9 \u2603",
            "Nats-Expected-Stream": stream,
        }

    run_with(module_nats.url, scenario)


def test_a_message_id_is_deduplicated(module_nats: NatsServer) -> None:
    async def scenario(client: PublishingClient, js: JetStreamContext, base: str) -> None:
        header = message_headers({"Nats-Msg-Id": "once"}, base.upper())
        first = await client.publish_acked(f"{base}.a", b"1", header, 5.0)
        again = await client.publish_acked(f"{base}.a", b"2", header, 5.0)
        assert again == first
        assert (await js.stream_info(base.upper())).state.messages == 1

    run_with(module_nats.url, scenario)


def test_refusals_raise_what_js_publish_raises(module_nats: NatsServer) -> None:
    async def scenario(client: PublishingClient, js: JetStreamContext, base: str) -> None:
        with pytest.raises(APIError) as theirs:
            await js.publish(f"{base}.a", b"x", stream="ANOTHER")
        with pytest.raises(APIError) as ours:
            await client.publish_acked(f"{base}.a", b"x", message_headers({}, "ANOTHER"), 5.0)
        assert type(ours.value) is type(theirs.value)
        assert ours.value.err_code == theirs.value.err_code

        no_stream = f"nostream{uuid.uuid4().hex[:10]}.a"
        with pytest.raises(NoStreamResponseError):
            await client.publish_acked(no_stream, b"x", message_headers({}, "NONE"), 5.0)
        with pytest.raises(BadSubjectError):
            await client.publish_acked(f"{base}.a b", b"x", message_headers({}, base.upper()), 5.0)
        with pytest.raises(ValueError, match="Bad Key"):
            message_headers({"Bad Key": "v"}, base.upper())

    run_with(module_nats.url, scenario)


def test_an_unanswered_publish_times_out_and_a_closed_client_fails_what_awaits_answers(
    module_nats: NatsServer,
) -> None:
    async def scenario(client: PublishingClient, js: JetStreamContext, base: str) -> None:
        silent = f"silent{uuid.uuid4().hex[:10]}.a"
        await client.subscribe(silent)  # an interest that never answers
        header = message_headers({}, "NONE")
        with pytest.raises(NatsTimeout):
            await client.publish_acked(silent, b"x", header, 0.2)
        waiting = asyncio.ensure_future(client.publish_acked(silent, b"x", header, 30.0))
        while not client._acks:
            await asyncio.sleep(0)  # until it awaits its acknowledgement
        requesting = asyncio.ensure_future(client.request(silent, b"x", timeout=30.0))
        await client.flush()  # the request is on its way: it awaits its answer
        _fail_requests_in_flight(client)
        with pytest.raises(RequestLost):
            await waiting
        with pytest.raises(RequestLost):
            await requesting

    run_with(module_nats.url, scenario)


@pytest.mark.parametrize(
    "reply",
    [
        b'{"stream":"S","seq":42}',
        b'{"stream":"S","seq":42,"duplicate":true}',
        b'{"stream":"S","domain":"hub","seq":42}',
    ],
)
def test_the_acknowledged_sequence_is_read_from_a_pub_ack(reply: bytes) -> None:
    assert acknowledged_sequence(reply) == 42


@pytest.mark.parametrize(
    ("reply", "duplicate"),
    [
        (b'{"stream":"S","seq":42}', False),
        # What nats-server writes (checked against a real one in test_jetstream_dedup.py).
        (b'{"stream":"S","seq":42,"duplicate": true}', True),
        (b'{"stream":"S","seq":42,"duplicate":true}', True),
        (b'{"stream":"duplicate","seq":42}', False),
    ],
)
def test_a_dropped_re_send_is_told_from_its_pub_ack(reply: bytes, duplicate: bool) -> None:
    assert dropped_as_duplicate(reply) is duplicate


def test_an_error_reply_raises_its_api_error() -> None:
    reply = b'{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}'
    with pytest.raises(APIError) as refused:
        acknowledged_sequence(reply)
    assert refused.value.err_code == 10077


def test_headers_without_metadata_name_only_the_stream() -> None:
    expected: Mapping[str, str] = {}
    assert message_headers(expected, "S") == {"Nats-Expected-Stream": "S"}
