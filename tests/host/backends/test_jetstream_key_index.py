"""``notification_backend.jetstream.idempotency_index``: a message id is checked against what
the stream retains, not only JetStream's duplicate window, against a real nats-server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aviso_builtins.backends.jetstream.backend import JetStreamBackend
from aviso_plugins.types import MESSAGE_ID_METADATA, BackendContext, MessageIdRefused
from tests.host.backends.jetstream_support import stream_state, unique
from tests.support.nats import NatsServer

WINDOW = "1s"


def publish(
    nats_url: str, base: str, sends: list[tuple[str, str, str]], **options: Any
) -> list[str]:
    """Through a backend of its own (it remembers nothing of earlier ones), publish each
    (subject suffix, payload, message id); each outcome ``stored``, ``replayed <sequence>``
    or the refusal's code."""
    context = BackendContext({"nats_url": nats_url, "duplicate_window": WINDOW, **options}, {})

    async def run() -> list[str]:
        backend = JetStreamBackend(context)
        await backend.start()
        outcomes = []
        try:
            for suffix, payload, message_id in sends:
                try:
                    record = await backend.publish(
                        f"{base}.{suffix}", payload, {MESSAGE_ID_METADATA: message_id}
                    )
                except MessageIdRefused as refused:
                    outcomes.append(refused.code)
                else:
                    outcomes.append(f"replayed {record.sequence}" if record.replayed else "stored")
        finally:
            await backend.shutdown()
        return outcomes

    return asyncio.run(asyncio.wait_for(run(), 30))


def test_past_the_window_a_retained_id_is_replayed_and_another_notification_refused(
    module_nats: NatsServer,
) -> None:
    base = unique("keys")
    first = [("1", '{"n":1}', "k1"), ("2", '{"n":1}', "k2"), ("3", '{"n":1}', "k3")]
    assert publish(module_nats.url, base, first) == ["stored"] * 3
    publish(module_nats.url, base, [("3", '{"n":2}', "newer")])  # replaces k3's message
    time.sleep(2.5)  # JetStream's 1 s window passes (not synchronisation)

    again = [
        ("1", '{"n":1}', "k1"),  # retained: replayed
        ("1", '{"n":9}', "k1"),  # another notification under a retained id: refused
        ("3", '{"n":1}', "k3"),  # no longer retained: stored anew, as once forgotten
    ]
    assert publish(module_nats.url, base, again) == [
        "replayed 1",
        "IDEMPOTENCY_KEY_REUSED",
        "stored",
    ]
    # Without the index the window alone decides: past it, the same re-send is stored twice
    # (what shows the window had indeed passed).
    assert publish(module_nats.url, base, [("2", '{"n":1}', "k2")], idempotency_index=False) == [
        "stored"
    ]
    assert stream_state(module_nats.url, base.upper()).last_seq == 6
