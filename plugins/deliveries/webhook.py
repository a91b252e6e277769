"""The ``webhook`` delivery kind: each notification's CloudEvent POSTed to the subscription's
URL, signed as the Standard Webhooks specification says.

Options (``subscriptions.webhook``): ``timeout_seconds`` (one attempt, connection to last
byte read; default 15), ``retry_schedule_seconds`` (the waits before each retry; default
``[5, 300, 1800, 7200, 18000, 36000]``), ``allowed_hosts`` (host names exempt from the address
check) and ``allow_private_networks`` (no address check at all; default false).

Server-side request forgery: unless exempt, a URL's host must resolve to public addresses
only (no loopback, link-local including cloud metadata, private, shared, unspecified,
multicast or reserved address), checked when the subscription is created and again at every
attempt, and the attempt connects to the very address it checked (so a name that re-resolves
elsewhere meanwhile changes nothing). Redirects are not followed, and at most
``RESPONSE_BYTES`` of an answer are read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import httpx

from aviso_plugins import hookimpl
from aviso_plugins.types import (
    DeliveryAttempt,
    DeliveryKind,
    DeliveryResult,
    InvalidValue,
    PreparedDelivery,
)

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
"""Random bytes in a generated secret (the specification asks for 24 to 64)."""
RESPONSE_BYTES = 4096
"""The most of a receiver's answer read (its status is all that counts)."""
MAX_CONNECTIONS = 64
CONTENT_TYPE = "application/cloudevents+json"
USER_AGENT = "aviso-py-webhook"
SCHEMES = ("http", "https")


class Refused(Exception):
    """The URL may not be reached; the message is safe to show to its owner."""


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,`` and the base64 HMAC-SHA256, keyed with the
    secret's bytes, of ``id.timestamp.body``."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def refused_address(text: str) -> bool:
    """Whether an address is anything but a public unicast one (an IPv4 address mapped
    into IPv6 is judged as itself)."""
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


def _url(text: str) -> httpx.URL:
    try:
        url = httpx.URL(text)
    except httpx.InvalidURL as exc:
        raise InvalidValue(f"'url' is not a URL: {exc}") from exc
    if url.scheme not in SCHEMES or not url.host:
        raise InvalidValue("'url' must be an absolute http:// or https:// URL")
    if url.userinfo:
        raise InvalidValue("'url' may not carry credentials")
    return url


class Webhook(DeliveryKind):
    kind: ClassVar[str] = "webhook"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "timeout_seconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": 300,
                "default": 15,
            },
            "retry_schedule_seconds": {
                "type": "array",
                "maxItems": 50,
                "items": {"type": "number", "minimum": 0, "maximum": 604800},
                "default": [5, 300, 1800, 7200, 18000, 36000],
            },
            "allowed_hosts": {"type": "array", "items": {"type": "string"}, "default": []},
            "allow_private_networks": {"type": "boolean", "default": False},
        },
    }
    delivery_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "required": ["kind", "url"],
        "additionalProperties": False,
        "properties": {
            "kind": {"const": "webhook"},
            "url": {"type": "string", "minLength": 1, "maxLength": 2048},
            "secret": {"type": "string", "pattern": "^whsec_[A-Za-z0-9+/]{32,88}={0,2}$"},
        },
    }

    def __init__(self, options: Mapping[str, Any]) -> None:
        super().__init__(options)
        self.timeout = float(options["timeout_seconds"])
        self.delays = tuple(float(delay) for delay in options["retry_schedule_seconds"])
        self.allowed_hosts = frozenset(host.lower() for host in options["allowed_hosts"])
        self.allow_private = bool(options["allow_private_networks"])
        self._pooled: httpx.AsyncClient | None = None
        self._pinned: httpx.AsyncClient | None = None

    async def start(self) -> None:
        # Never the environment's proxies: the request must go to the address checked.
        common: dict[str, Any] = {
            "follow_redirects": False,
            "timeout": self.timeout,
            "trust_env": False,
        }
        self._pooled = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS), **common
        )
        # Connections to a checked address are not kept: a pooled one would be shared by
        # every host name that resolves to that address, whatever name its TLS checked.
        self._pinned = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=0),
            **common,
        )

    async def close(self) -> None:
        for client in (self._pooled, self._pinned):
            if client is not None:
                await client.aclose()
        self._pooled = self._pinned = None

    @property
    def retry_delays(self) -> Sequence[float]:
        return self.delays

    def _exempt(self, url: httpx.URL) -> bool:
        return self.allow_private or url.host.lower() in self.allowed_hosts

    async def _checked_address(self, url: httpx.URL) -> str:
        """The first address ``url``'s host resolves to, every one of them checked."""
        try:
            found = await asyncio.get_running_loop().getaddrinfo(
                url.host,
                url.port or (443 if url.scheme == "https" else 80),
                type=socket.SOCK_STREAM,
            )
        except (OSError, UnicodeError) as exc:
            raise Refused(f"the host '{url.host}' does not resolve") from exc
        addresses = [str(info[4][0]) for info in found]
        if not addresses:
            raise Refused(f"the host '{url.host}' does not resolve")
        if any(refused_address(address) for address in addresses):
            raise Refused(
                f"the host '{url.host}' resolves to a loopback, link-local, private or other "
                "non-public address (subscriptions.webhook.allowed_hosts or "
                "allow_private_networks would allow it)"
            )
        return addresses[0]

    async def prepare(self, delivery: Mapping[str, Any]) -> PreparedDelivery:
        url = _url(delivery["url"])
        if not self._exempt(url):
            try:
                async with asyncio.timeout(self.timeout):
                    await self._checked_address(url)
            except TimeoutError as exc:
                raise InvalidValue(
                    f"'url' refused: the host '{url.host}' did not resolve in time"
                ) from exc
            except Refused as exc:
                raise InvalidValue(f"'url' refused: {exc}") from exc
        given = delivery.get("secret")
        if given is not None:
            try:
                key = base64.b64decode(given.removeprefix(SECRET_PREFIX), validate=True)
            except binascii.Error as exc:
                raise InvalidValue("'secret' must be whsec_ and base64") from exc
            if not 24 <= len(key) <= 64:
                raise InvalidValue("'secret' must hold 24 to 64 bytes")
        secret = given or SECRET_PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()
        stored = {"kind": self.kind, "url": str(url), "secret": secret}
        shown = self.public_view(stored) if given else stored
        return PreparedDelivery(stored=stored, shown=shown)

    def public_view(self, stored: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"kind": self.kind, "url": stored["url"]}

    async def deliver(self, attempt: DeliveryAttempt) -> DeliveryResult:
        assert self._pooled is not None and self._pinned is not None, "start() was not called"
        stored = attempt.delivery
        url = httpx.URL(stored["url"])
        record = attempt.notification.record
        message_id = f"{attempt.notification.event_type}@{record.sequence}"
        body = attempt.notification.cloudevent
        timestamp = int(time.time())
        headers = {
            "content-type": CONTENT_TYPE,
            "user-agent": USER_AGENT,
            "webhook-id": message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(stored["secret"], message_id, timestamp, body),
        }
        client = self._pooled
        extensions: dict[str, Any] = {}
        target = url
        try:
            async with asyncio.timeout(self.timeout):
                if not self._exempt(url):
                    address = await self._checked_address(url)
                    client = self._pinned
                    target = url.copy_with(host=address)
                    headers["host"] = url.netloc.decode("ascii")
                    if url.scheme == "https":
                        extensions["sni_hostname"] = url.host
                async with client.stream(
                    "POST", target, content=body, headers=headers, extensions=extensions
                ) as response:
                    read = 0
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read >= RESPONSE_BYTES:
                            break
                    status = response.status_code
        except Refused as exc:
            return DeliveryResult("retry", str(exc))
        except (TimeoutError, httpx.TimeoutException):
            return DeliveryResult("retry", f"no answer within {self.timeout:g} s")
        except httpx.HTTPError as exc:
            return DeliveryResult("retry", f"the request failed ({type(exc).__name__})")
        if 200 <= status < 300:
            return DeliveryResult("delivered")
        if status == 410:
            return DeliveryResult("gone", "the receiver answered 410 Gone")
        if 300 <= status < 400:
            return DeliveryResult("retry", f"the receiver answered {status} (not followed)")
        return DeliveryResult("retry", f"the receiver answered {status}")


@hookimpl
def aviso_delivery_kinds() -> list[type[DeliveryKind]]:
    return [Webhook]
