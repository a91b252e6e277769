"""Structured logging: one JSON object per line (or, with ``logging.format: text``, one
readable line for a terminal), carrying the current request id."""

from __future__ import annotations

import contextvars
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any

from aviso_host.config.redact import mask_secrets
from aviso_host.encoding import dumps
from aviso_plugins.service import ECHO_LIMIT as ECHO_LIMIT
from aviso_plugins.service import echoed as echoed
from aviso_plugins.service import log_event as log_event

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "aviso_request_id", default=None
)

audit_var: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "aviso_audit", default=None
)
"""(username, auth realm) of the caller the auth middleware resolved for this request."""

ANONYMOUS = "anonymous"
NO_REALM = "none"

LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}

logger = logging.getLogger("aviso")

LINE_TEXT_LIMIT = 4_096
"""Backstop for any one text member of a log line, whoever logged it."""

# The level names of the error telemetry table (``warn``, not Python's ``warning``).
_LEVEL_NAMES = {logging.WARNING: "warn"}


_secrets: frozenset[str] = frozenset()


def register_secrets(values: Iterable[str]) -> None:
    """Mask these values (configured secrets) in every log line from now on."""
    global _secrets
    _secrets = _secrets.union(values)


def masked(text: str) -> str:
    """``text`` with every configured secret masked, as log lines show it (error bodies and
    stream error events use it too)."""
    return mask_secrets(text, _secrets) if _secrets else text


TEXT_FORMAT = "text"
"""``logging.format`` for readable lines; ``json`` (the default) or anything else: JSON."""


class JsonLineFormatter(logging.Formatter):
    """One record, one line, secrets masked: a JSON object, or with ``text`` the same
    members as ``<timestamp> <level> <message> key=value ...`` (values that are not plain
    words JSON-quoted, so a line stays one line)."""

    def __init__(self, text: bool = False) -> None:
        super().__init__()
        self._text = text

    def format(self, record: logging.LogRecord) -> str:
        entry = self._entry(record)
        return masked(_text_line(entry) if self._text else dumps(entry, sort_keys=False))

    def _entry(self, record: logging.LogRecord) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": _LEVEL_NAMES.get(record.levelno, record.levelname.lower()),
            "logger": record.name,
            "message": echoed(record.getMessage(), LINE_TEXT_LIMIT),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
            entry.update(audit_fields())
        for name, value in getattr(record, "fields", {}).items():
            entry[name] = echoed(value, LINE_TEXT_LIMIT) if isinstance(value, str) else value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return entry


def _text_line(entry: dict[str, Any]) -> str:
    timestamp, level, message = entry.pop("timestamp"), entry.pop("level"), entry.pop("message")
    del entry["logger"]
    text = message if message.isprintable() else dumps(message)
    pairs = (f"{name}={_text_value(value)}" for name, value in entry.items())
    return " ".join((timestamp, f"{level.upper():<5}", text, *pairs))


def _text_value(value: Any) -> str:
    """A word as it is; anything else (spaces, quotes, line breaks, numbers, lists) as JSON."""
    if isinstance(value, str) and value.isprintable() and value and not set(value) & set(' "='):
        return value
    return dumps(value, sort_keys=False)


def configure_logging(level: str, log_format: str = "json") -> None:
    """Route every logger (uvicorn's included) through one formatter on stderr: JSON lines,
    or readable text lines when ``log_format`` is ``text``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter(text=log_format == TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS.get(level, logging.INFO))
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def audit_fields() -> dict[str, str]:
    """``username`` and ``auth_realm`` of the current request's caller (audit, aviso-server
    0.13): ``anonymous`` / ``none`` when nobody authenticated."""
    caller = audit_var.get()
    username, realm = caller if caller is not None else (ANONYMOUS, NO_REALM)
    return {"username": username, "auth_realm": realm}


def set_audit(username: str, realm: str | None) -> None:
    """Record who made the current request, for every log line it writes from now on."""
    audit_var.set((username, realm or NO_REALM))
