"""The one error configuration problems raise, and how it names the offending key."""

from __future__ import annotations

from collections.abc import Iterable

KeyPath = tuple[str | int, ...]
"""Where a value sits in the document: mapping keys and list indexes."""


class ConfigError(Exception):
    """The configuration cannot be used; the message names the key at fault."""


def key_path(path: Iterable[str | int]) -> str:
    """Render a key path the way operators write it: ``auth.admin_roles.lab[0]``."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text = f"{text}.{part}" if text else part
    return text


def at(path: Iterable[str | int], message: str) -> ConfigError:
    """A :class:`ConfigError` for ``message`` prefixed with the key path (if any)."""
    where = key_path(path)
    return ConfigError(f"{where}: {message}" if where else message)
