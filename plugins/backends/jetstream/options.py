"""``notification_backend.jetstream``: its declaration (and so its JSON Schema) and the
parsed, checked settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from aviso_plugins._shared.literals import parse_duration
from aviso_plugins.shapes import read_shape, shape, shape_schema

_POSITIVE = (
    "timeout_seconds",
    "retry_attempts",
    "reconnect_delay_ms",
    "publish_retry_attempts",
    "publish_retry_base_delay_ms",
)


DEFAULT_URL = "nats://localhost:4222"
_URL_SCHEMES = ("nats", "tls")
_MAX_REPLICAS = 5
"""JetStream refuses a stream with more replicas."""
_DEFAULT_SUBSCRIPTION_ATTEMPTS = 5
_MAX_WINDOW_SECONDS = (2**63 - 1) // 1_000_000_000


WORKQUEUE_REFUSED = (
    "'workqueue' is refused (as by aviso-server 0.13): a work-queue stream deletes each "
    "notification once one consumer acknowledged it, so history and concurrent watchers "
    "cannot work; use 'limits' or 'interest'"
)


class OptionsError(ValueError):
    """A setting is unusable; the message names ``notification_backend.jetstream.<key>``."""


class OptionRefused(OptionsError):
    """One option of the section refused while parsing it: ``key`` and ``reason`` apart."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"notification_backend.jetstream.{key}: {reason}")
        self.key = key
        self.reason = reason


Count = Annotated[int, Field(ge=0)]


@shape()
@dataclass(frozen=True, slots=True)
class JetStreamSection:
    """``notification_backend.jetstream`` as written."""

    nats_url: str = DEFAULT_URL
    """One server URL, or several separated by commas (the servers of one cluster)."""
    token: str | None = None
    """The NATS token; ``NATS_TOKEN`` when not written."""
    timeout_seconds: Count = 30
    retry_attempts: Count = 3
    max_messages: int | None = None
    max_bytes: int | None = None
    retention_time: str | None = None
    storage_type: Literal["file", "memory"] = "file"
    replicas: Count | None = None
    retention_policy: Literal["limits", "interest", "workqueue"] = "limits"
    discard_policy: Literal["old", "new"] = "old"
    enable_auto_reconnect: bool = True
    # null (YAML ~) reads as unset: unlimited.
    max_reconnect_attempts: Count | None = None
    """Reconnect attempts after the connection is lost; unset or 0: unlimited, n > 0: give
    up for good after n (the backend then reports not ready until restarted)."""
    reconnect_delay_ms: Count = 2000
    publish_retry_attempts: Count = 5
    publish_retry_base_delay_ms: Count = 150
    embedded_store_dir: str | None = None
    """Start a private nats-server with file storage here instead of using ``nats_url``
    (empty: none)."""
    duplicate_window: str | None = None
    """How long JetStream remembers a ``Nats-Msg-Id`` to drop a re-send; unset leaves the
    server's default (2 minutes, or the stream's retention if shorter)."""


OPTIONS_SCHEMA: Mapping[str, Any] = shape_schema(JetStreamSection)


@dataclass(frozen=True, slots=True)
class JetStreamOptions(JetStreamSection):
    """The section parsed and checked: durations in seconds, the token resolved."""

    retention_seconds: int | None = None
    duplicate_window_seconds: int | None = None

    @property
    def subscription_attempts(self) -> int:
        """Attempts at creating a live consumer: ``max_reconnect_attempts`` when positive,
        one when it is 0, five when it is unset."""
        if self.max_reconnect_attempts is None:
            return _DEFAULT_SUBSCRIPTION_ATTEMPTS
        return max(self.max_reconnect_attempts, 1)


def split_servers(nats_url: str) -> list[str]:
    """The server URLs of a ``nats_url``, in the order given (nats-py's server list)."""
    return [part.strip() for part in nats_url.split(",") if part.strip()]


def _url_problem(url: str) -> str | None:
    """Why ``url`` is not a NATS server URL, or ``None``. The port may be left out (4222,
    as every NATS client assumes); user and password may be given."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in _URL_SCHEMES:
        return "must start with nats:// or tls://"
    if not parts.hostname:
        return "has no host"
    if port == 0:
        return "port must be between 1 and 65535"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must be scheme://[user:password@]host[:port] only"
    return None


def parse_options(
    raw: Mapping[str, Any], environ: Mapping[str, str] = os.environ
) -> JetStreamOptions:
    """Apply defaults and the checks that only matter once this backend is selected."""
    section = read_shape(JetStreamSection, raw)

    def fail(key: str, reason: str) -> OptionsError:
        return OptionRefused(key, reason)

    for key in _POSITIVE:
        if getattr(section, key) <= 0:
            raise fail(key, "must be greater than 0")
    if section.retention_policy == "workqueue":
        raise fail("retention_policy", WORKQUEUE_REFUSED)
    url = section.nats_url
    if not url.strip():
        raise fail("nats_url", "must not be blank")
    for server in url.split(","):
        problem = _url_problem(server.strip()) if server.strip() else "has an empty entry"
        if problem is not None:
            shown = redacted(server.strip())
            raise fail("nats_url", f"{shown!r} {problem}" if server.strip() else problem)
    if (section.replicas or 0) > _MAX_REPLICAS:
        raise fail("replicas", f"must be at most {_MAX_REPLICAS} (the JetStream maximum)")

    def duration(key: str, text: str | None) -> int | None:
        """Seconds of a positive duration option; ``None`` when it is not set."""
        if text is None:
            return None
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise fail(key, str(exc)) from exc
        if seconds <= 0:
            raise fail(key, "must be greater than 0")
        return seconds

    retention_seconds = duration("retention_time", section.retention_time)
    duplicate_window_seconds = duration("duplicate_window", section.duplicate_window)
    if duplicate_window_seconds is not None:
        if duplicate_window_seconds > _MAX_WINDOW_SECONDS:
            raise fail("duplicate_window", "too long (JetStream counts it in int64 nanoseconds)")
        # JetStream refuses a stream whose window outlasts its messages.
        if retention_seconds is not None and duplicate_window_seconds > retention_seconds:
            raise fail(
                "duplicate_window",
                f"must not be longer than retention_time ({section.retention_time})",
            )
    written = {item.name: getattr(section, item.name) for item in fields(section)}
    return JetStreamOptions(
        **{
            **written,
            "token": section.token or environ.get("NATS_TOKEN") or None,
            "retention_seconds": retention_seconds,
            "duplicate_window_seconds": duplicate_window_seconds,
        }
    )


def redacted(nats_url: str) -> str:
    """``nats_url`` (one URL or a comma-separated list) without user names and passwords."""
    shown = []
    for url in nats_url.split(","):
        scheme, separator, rest = url.partition("://")
        if separator and "@" in rest:
            url = f"{scheme}://[REDACTED]@{rest.rsplit('@', 1)[1]}"
        shown.append(url)
    return ",".join(shown)
