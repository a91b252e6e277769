"""The aviso-server 0.13 operations keys: ``application.homepage`` and the replay caps; and
``logging.format``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from aviso_host.config.errors import at
from aviso_host.config.settings import DEFAULT_HOMEPAGE_URLS
from aviso_host.config.unknown_keys import nearest


def check_homepage(application: Mapping[str, Any]) -> None:
    """Each link must be an absolute http(s) URL with a host and no user information."""
    homepage = application.get("homepage", {})
    for key in DEFAULT_HOMEPAGE_URLS:
        if key not in homepage:
            continue
        value = homepage[key]
        if not _is_public_http_url(value):
            raise at(
                ("application", "homepage", key),
                f"must be an absolute http(s) URL with a host and no userinfo, got {value!r}",
            )


def _is_public_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError:
        return False
    return (
        parts.scheme.lower() in ("http", "https")
        and bool(parts.hostname)
        and "@" not in parts.netloc
        and value == value.strip()
    )


LOG_FORMATS = ("json", "text")


def log_format_warnings(logging_section: Mapping[str, Any]) -> list[str]:
    """``logging.format`` other than ``json`` or ``text`` is accepted (aviso-server files
    carry other values) and keeps JSON lines, with a warning."""
    if "format" not in logging_section or logging_section["format"] in LOG_FORMATS:
        return []
    value = logging_section["format"]
    close = nearest(str(value), LOG_FORMATS)
    hint = f"did you mean {close!r}?" if close else "use 'json' or 'text'"
    return [f"logging.format: {value!r} is not a log format ({hint}); logs stay JSON lines"]


def replay_cap_warnings(watch: Mapping[str, Any]) -> list[str]:
    """0.13 refuses a cap of 0; 0.7.1 accepted it (no history delivered), so it still starts."""
    if watch.get("max_historical_notifications") == 0:
        return [
            "watch_endpoint.max_historical_notifications: 0 delivers no history; aviso-server "
            "0.13 refuses it (positive integers only)"
        ]
    return []


_WORKQUEUE_REFUSED = (
    "'workqueue' is refused (as by aviso-server 0.13): a work-queue stream deletes each "
    "notification once one consumer acknowledged it, so history and concurrent watchers "
    "cannot work; use 'limits' or 'interest'"
)


def check_workqueue(document: Mapping[str, Any]) -> None:
    """``retention_policy: workqueue`` in a schema's storage policy fails startup (whatever
    the backend: the key is JetStream's, and refusing it everywhere keeps a file valid for
    both; the JetStream backend refuses it in its own section)."""
    for event_type, schema in document.get("notification_schema", {}).items():
        policy = schema.get("storage_policy", {})
        if policy.get("retention_policy") == "workqueue":
            raise at(
                ("notification_schema", event_type, "storage_policy", "retention_policy"),
                _WORKQUEUE_REFUSED,
            )
