"""Constructing and starting a plugin, where any failure is one clean error line.

Every place the host instantiates a plugin class from configuration (field handlers while
checking schemas, the storage backend, the auth provider, stream authorisers, sinks) goes
through :func:`construct`. ``serve`` and ``config check`` run the same construction, so a
configuration ``config check`` accepts is one ``serve`` can build. Starting the plugins
(:func:`start`, at server startup) reports a failure the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from aviso_host.config.errors import ConfigError, KeyPath, at, key_path
from aviso_host.config.redact import mask_secrets
from aviso_host.plugins import PluginError

T = TypeVar("T")
logger = logging.getLogger(__name__)


def construct(
    factory: Callable[[], T], path: KeyPath, plugin: str, secrets: Iterable[str] = ()
) -> T:
    """Run ``factory`` (a plugin constructor call); any exception becomes a
    :class:`ConfigError` ``<path>: <reason> [<plugin>]`` with secret values masked.

    ``plugin`` says who failed (``PluginRegistry.describe``): kind, name, entry point and
    distribution. ``ValueError`` is the documented way to refuse options, so its message is
    the reason; any other exception is a plugin defect and is shown with its type.
    """
    try:
        return factory()
    except ConfigError:
        raise
    except Exception as exc:
        raise plugin_error(exc, path, plugin, secrets) from exc


def plugin_error(
    exc: Exception, path: KeyPath, plugin: str, secrets: Iterable[str] = ()
) -> ConfigError:
    reason = " ".join(str(exc).split()) or "(no message)"
    if not isinstance(exc, ValueError):
        reason = f"{type(exc).__name__}: {reason}"
    reason = f"{mask_secrets(reason, secrets)} [{plugin}]"
    # A plugin that already names the key (``notification_backend.jetstream.x: ...``).
    where = key_path(path)
    if path and reason.startswith((f"{where}:", f"{where}.", f"{where}[")):
        return ConfigError(reason)
    return at(path, reason)


async def start(
    starter: Callable[[], Awaitable[None]],
    path: KeyPath,
    plugin: str,
    secrets: Iterable[str] = (),
) -> None:
    """Await ``starter`` (a plugin's ``start``); any exception becomes a :class:`PluginError`
    worded as :func:`construct` words a constructor failure, the traceback logged at debug
    level only."""
    try:
        await starter()
    except Exception as exc:
        failure = plugin_error(exc, path, plugin, secrets)
        logger.debug("%s did not start", plugin, exc_info=exc)
        raise PluginError(str(failure)) from exc
