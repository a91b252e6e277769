"""Who one client is, for what one client may hold: its share of the connections past the
caps (and of ``max_connections_per_client``) and its budget of remembered Idempotency-Keys.

An IPv4 client is its address. An IPv6 client is its address's /64 network: a host is
normally given a whole /64 (SLAAC, privacy addresses), so one machine may send from as many
addresses as it likes, and counted per address it would be as many clients as it chose.
An IPv4-mapped IPv6 address (``::ffff:192.0.2.1``, a dual-stack listener) is the IPv4
client it maps.
"""

from __future__ import annotations

import ipaddress

IPV6_CLIENT_PREFIX = 64
"""The IPv6 network one client is counted by."""


def client_of(address: str) -> str:
    """The client ``address`` belongs to: the address itself (IPv4, or anything that is not
    an IP address), or its IPv6 /64 network (``2001:db8:1:2::/64``)."""
    if ":" not in address:  # IPv4 (most connections): no parsing
        return address
    try:
        ip = ipaddress.IPv6Address(address.partition("%")[0])  # a zone id names no client
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, IPV6_CLIENT_PREFIX), strict=False))
