"""``notification_backend.jetstream``: its JSON Schema and the parsed, checked settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aviso_plugins._shared.literals import parse_duration

_COUNT = {"type": "integer", "minimum": 0}

OPTIONS_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "nats_url": {"type": "string"},
        "token": {"type": "string"},
        "timeout_seconds": _COUNT,
        "retry_attempts": _COUNT,
        "max_messages": {"type": "integer"},
        "max_bytes": {"type": "integer"},
        "retention_time": {"type": "string"},
        "storage_type": {"enum": ["file", "memory"]},
        "replicas": _COUNT,
        "retention_policy": {"enum": ["limits", "interest", "workqueue"]},
        "discard_policy": {"enum": ["old", "new"]},
        "enable_auto_reconnect": {"type": "boolean"},
        # null (YAML ~) reads as unset: unlimited.
        "max_reconnect_attempts": {"type": ["integer", "null"], "minimum": 0},
        "reconnect_delay_ms": _COUNT,
        "publish_retry_attempts": _COUNT,
        "publish_retry_base_delay_ms": _COUNT,
        "embedded_store_dir": {"type": "string"},
        "duplicate_window": {"type": "string"},
    },
}

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


class OptionsError(ValueError):
    """A setting is unusable; the message names ``notification_backend.jetstream.<key>``."""


@dataclass(frozen=True, slots=True)
class JetStreamOptions:
    nats_url: str = DEFAULT_URL
    """One server URL, or several separated by commas (the servers of one cluster)."""
    token: str | None = None
    timeout_seconds: int = 30
    retry_attempts: int = 3
    max_messages: int | None = None
    max_bytes: int | None = None
    retention_seconds: int | None = None
    storage_type: str = "file"
    replicas: int | None = None
    retention_policy: str = "limits"
    discard_policy: str = "old"
    enable_auto_reconnect: bool = True
    max_reconnect_attempts: int | None = None
    """Reconnect attempts after the connection is lost; ``None`` or 0: unlimited, n > 0:
    give up for good after n (the backend then reports not ready until restarted)."""
    reconnect_delay_ms: int = 2000
    publish_retry_attempts: int = 5
    publish_retry_base_delay_ms: int = 150
    embedded_store_dir: str | None = None
    """Start a private nats-server with file storage here instead of using ``nats_url``
    (empty: none)."""
    duplicate_window_seconds: int | None = None
    """How long JetStream remembers a ``Nats-Msg-Id`` to drop a re-send; ``None`` leaves
    the server's default (2 minutes, or the stream's retention if shorter)."""

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

    def fail(key: str, reason: str) -> OptionsError:
        return OptionsError(f"notification_backend.jetstream.{key}: {reason}")

    for key in _POSITIVE:
        if key in raw and raw[key] <= 0:
            raise fail(key, "must be greater than 0")
    if raw.get("retention_policy") == "workqueue":
        # History and concurrent watchers need every notification kept (aviso-server 0.13).
        raise fail("retention_policy", "'workqueue' is not supported; use 'limits' or 'interest'")
    url = raw.get("nats_url", DEFAULT_URL)
    if not url.strip():
        raise fail("nats_url", "must not be blank")
    for server in url.split(","):
        problem = _url_problem(server.strip()) if server.strip() else "has an empty entry"
        if problem is not None:
            shown = redacted(server.strip())
            raise fail("nats_url", f"{shown!r} {problem}" if server.strip() else problem)
    if raw.get("replicas", 0) > _MAX_REPLICAS:
        raise fail("replicas", f"must be at most {_MAX_REPLICAS} (the JetStream maximum)")

    def duration(key: str) -> int | None:
        """Seconds of a positive duration option; ``None`` when it is not set."""
        if key not in raw:
            return None
        try:
            seconds = parse_duration(raw[key])
        except ValueError as exc:
            raise fail(key, str(exc)) from exc
        if seconds <= 0:
            raise fail(key, "must be greater than 0")
        return seconds

    retention_seconds = duration("retention_time")
    duplicate_window_seconds = duration("duplicate_window")
    if duplicate_window_seconds is not None:
        if duplicate_window_seconds > _MAX_WINDOW_SECONDS:
            raise fail("duplicate_window", "too long (JetStream counts it in int64 nanoseconds)")
        # JetStream refuses a stream whose window outlasts its messages.
        if retention_seconds is not None and duplicate_window_seconds > retention_seconds:
            raise fail(
                "duplicate_window",
                f"must not be longer than retention_time ({raw['retention_time']})",
            )
    simple = {
        key: raw[key]
        for key in JetStreamOptions.__dataclass_fields__
        if key in raw
        and key not in ("nats_url", "token", "retention_seconds", "duplicate_window_seconds")
    }
    token = raw.get("token") or environ.get("NATS_TOKEN") or None
    return JetStreamOptions(
        nats_url=url,
        token=token,
        retention_seconds=retention_seconds,
        duplicate_window_seconds=duplicate_window_seconds,
        **simple,
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
