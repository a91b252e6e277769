"""What a plugin contributes to the whole server process rather than to one plugin kind: a
configuration section of its own anywhere in the document (hook ``aviso_settings_sections``),
log handlers (hook ``aviso_log_handlers``) and process-wide Prometheus collectors (hook
``aviso_metrics``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aviso_plugins.auth import ConfigurationProblem

__all__ = ["LogSetup", "SettingsSection"]


@dataclass(frozen=True, slots=True)
class SettingsSection:
    """A configuration section a plugin owns, at ``path`` in the document (``("logging",
    "otlp")`` is ``logging: {otlp: ...}``).

    The host validates the section against ``schema`` (derive it with
    :func:`aviso_plugins.shapes.shape_schema`) wherever the configuration is read: written
    values, ``AVISOSERVER_*`` overrides converted by it, unknown keys reported with the
    nearest declared one, its ``default`` values shown by ``config check --defaults``. An
    absent section is checked as ``{}``. The section must not be one the host or another
    plugin declares.
    """

    path: tuple[str, ...]
    schema: Mapping[str, Any]
    check: Callable[[Mapping[str, Any]], Sequence[ConfigurationProblem]] | None = None
    """Rules beyond the schema, given the section (validated, ``{}`` when absent, its
    defaults not filled in). Raise :class:`ConfigurationProblem` to refuse the configuration
    (``serve`` and ``config check`` print ``Error: <path>: <message>``; with an empty path,
    the message alone); return the problems that are only warnings."""

    @property
    def key(self) -> str:
        """The dotted path, as messages and ``aviso-server plugins`` name the section."""
        return ".".join(self.path)

    def options(self, document: Mapping[str, Any]) -> Mapping[str, Any]:
        """The section as ``document`` (a validated configuration) has it, ``{}`` when
        absent."""
        node: Any = document
        for key in self.path:
            node = node.get(key) if isinstance(node, Mapping) else None
        return node if isinstance(node, Mapping) else {}


@dataclass(frozen=True, slots=True)
class LogSetup:
    """What ``aviso_log_handlers`` receives."""

    configuration: Mapping[str, Any]
    """The validated configuration document (read a declared section with
    :meth:`SettingsSection.options`)."""
    json_formatter: logging.Formatter
    """Formats a record as the host's JSON log line (request id, audit fields, configured
    secrets masked, long text capped), whatever ``logging.format`` selects for the console."""
    version: str
    """The server's version."""
