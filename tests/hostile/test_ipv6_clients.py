"""One IPv6 host is one client, whichever addresses of its /64 it sends from.

A host is normally given a whole /64, so counted per address it could be as many clients as
it chose: 2,500 Idempotency-Keys from 2,500 addresses of one /64 were 2,500 writers holding
one key each, and past the total the writer that lost its oldest key was the quiet one
(every writer held one, and it had held its one longest). The connection caps' per-address
share of the probe reserve was likewise no bound for it.

The attacker's addresses cannot be had on 127.0.0.1, so the parts that file a client are
driven with them directly: the notify route's ``writer_of`` in front of the real in-memory
backend, and the real connection caps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_host.clients import client_of
from aviso_host.http_protocol import PROBE_RESERVE_PER_CLIENT, ConnectionCaps
from aviso_host.routes.notify import writer_of
from aviso_plugins.types import MESSAGE_ID_METADATA, BackendContext

TOTAL = 2_000
FLOOD = 2_500


def keyed(message_id: str) -> Mapping[str, str]:
    return {MESSAGE_ID_METADATA: message_id}


def test_keys_from_many_addresses_of_one_ipv6_network_evict_none_of_a_quiet_writer_s() -> None:
    options = {
        "max_history_per_topic": 10_000,
        "duplicate_window": "1h",
        "duplicate_window_max_keys": TOTAL,
        # The window's own budget is under test: the retained-key index would find the
        # evicted keys again in the history.
        "idempotency_index": False,
    }
    backend = InMemoryBackend(BackendContext(options, {}))
    quiet = writer_of({"client": ("2001:db8:aaaa:1::7", 50000)}, None)

    async def scenario() -> tuple[bool, bool]:
        await backend.publish_from(quiet, "gauge.quiet", "null", keyed("quiet"))
        for index in range(FLOOD):
            # A new address of the attacker's /64 for every key.
            flooder = writer_of({"client": (f"2001:db8:bbbb:2::{index + 1:x}", 40000)}, None)
            await backend.publish_from(flooder, "gauge.flood", "null", keyed(f"f{index}"))
        again = await backend.publish_from(quiet, "gauge.quiet", "null", keyed("quiet"))
        first_flood = await backend.publish_from(
            writer_of({"client": ("2001:db8:bbbb:2::1", 40000)}, None),
            "gauge.flood",
            "null",
            keyed("f0"),
        )
        return again.replayed, first_flood.replayed

    quiet_remembered, flood_oldest_remembered = asyncio.run(scenario())
    assert quiet_remembered, "the quiet writer's key was evicted by one /64's flood"
    assert not flood_oldest_remembered, "the flood kept its oldest key past the total"


class _Held:
    """A connection in the probe reserve that has not shown it is no probe."""

    def evictable(self, now: float) -> bool:
        return False

    def evict(self) -> None:
        raise AssertionError("a connection that may be a probe was evicted")


def test_one_ipv6_network_holds_at_most_its_share_of_the_probe_reserve() -> None:
    caps = ConnectionCaps(capacity=0)
    places = [
        caps.accept(client_of(f"2001:db8:cccc:3::{index + 1:x}"), _Held(), 0.0)
        for index in range(2 * PROBE_RESERVE_PER_CLIENT)
    ]
    held = [place for place in places if place is not None]
    assert len(held) == PROBE_RESERVE_PER_CLIENT
    # Another network, and an IPv4 client, still get places.
    assert caps.accept(client_of("2001:db8:dddd:4::1"), _Held(), 0.0) is not None
    assert caps.accept(client_of("::ffff:192.0.2.1"), _Held(), 0.0) is not None


def test_a_client_is_its_ipv4_address_or_its_ipv6_network() -> None:
    assert client_of("192.0.2.1") == "192.0.2.1"
    assert client_of("2001:db8:1:2:3:4:5:6") == client_of("2001:db8:1:2::9") == "2001:db8:1:2::/64"
    assert client_of("2001:db8:1:3::9") != client_of("2001:db8:1:2::9")
    assert client_of("::ffff:192.0.2.1") == "192.0.2.1"
    assert client_of("fe80::1%eth0") == "fe80::/64"
