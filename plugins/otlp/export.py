"""``logging.otlp``: its declaration and rules, the export's counters, and the start of the
export (the SDK is imported only then: :mod:`aviso_builtins.otlp.sdk`)."""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from prometheus_client import Counter

from aviso_plugins.auth import ConfigurationProblem
from aviso_plugins.process import SettingsSection
from aviso_plugins.shapes import read_shape, shape, shape_schema

if TYPE_CHECKING:
    from aviso_builtins.otlp.sdk import OtlpLogExport

__all__ = [
    "EXTRA",
    "MAX_QUEUE_SIZE",
    "SECTION",
    "TALLIES",
    "ExportTallies",
    "OtlpSettings",
    "otlp_endpoint",
    "otlp_settings",
    "start_otlp_export",
]

MAX_QUEUE_SIZE = 2048
"""Records waiting for export; beyond it they are dropped (and counted)."""
EXTRA = "otlp"
# What the extra installs that the export imports: the SDK and its two OTLP exporters.
_EXTRA_MODULES = (
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp.proto.grpc",
    "opentelemetry.exporter.otlp.proto.http",
)
_OTLP_HTTP_PATH = "/v1/logs"


@shape()
@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """``logging.otlp``: log records also exported over OTLP (aviso-server 0.8.1)."""

    enabled: bool = False
    endpoint: str = ""
    """The collector URL as the exporter uses it: scheme added, ``/v1/logs`` for http."""
    protocol: Literal["grpc", "http"] = "grpc"


def otlp_endpoint(endpoint: str, protocol: str) -> str:
    """The URL the exporter is given: ``http://`` when no scheme is written, and the OTLP/HTTP
    logs path for ``http`` (as aviso-server does)."""
    url = endpoint.strip()
    if "://" not in url:
        url = f"http://{url}"
    if protocol == "http" and not url.rstrip("/").endswith(_OTLP_HTTP_PATH):
        url = url.rstrip("/") + _OTLP_HTTP_PATH
    return url


def _check(section: Mapping[str, Any]) -> list[ConfigurationProblem]:
    if not section.get("enabled", False):
        return []
    if not str(section.get("endpoint", "")).strip():
        raise ConfigurationProblem(
            ("logging", "otlp", "endpoint"), "is required when logging.otlp.enabled is true"
        )
    if not all(_installed(name) for name in _EXTRA_MODULES):
        raise ConfigurationProblem(
            (),
            f"logging.otlp.enabled needs the {EXTRA} extra, which is not installed: "
            f"pip install 'aviso-py[{EXTRA}]'",
        )
    return []


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that is missing, or blocked in sys.modules
        return False


SECTION = SettingsSection(("logging", "otlp"), shape_schema(OtlpSettings), _check)


def otlp_settings(configuration: Mapping[str, Any]) -> OtlpSettings:
    """``logging.otlp`` of a validated configuration document, its endpoint as the exporter
    is given it."""
    settings = read_shape(OtlpSettings, SECTION.options(configuration))
    if not settings.endpoint.strip():
        return settings
    return OtlpSettings(
        settings.enabled, otlp_endpoint(settings.endpoint, settings.protocol), settings.protocol
    )


class ExportTallies:
    """The process's OTLP counters (logging is process-wide, so are they).

    They belong to no registry: each service's registry adds them. Under ``serve --workers``
    prometheus-client keeps them in its multiprocess files, so the supervisor sums them.
    """

    def __init__(self) -> None:
        self.export_failures = Counter(
            "aviso_otlp_export_failures",
            "OTLP log exports that failed (collector down, slow or refusing)",
            registry=None,
        )
        self.suppressed_records = Counter(
            "aviso_otlp_suppressed_log_records",
            "Log records dropped because the OTLP export queue was full",
            registry=None,
        )

    def suppressed(self) -> None:
        self.suppressed_records.inc()

    def failed(self) -> None:
        self.export_failures.inc()


TALLIES = ExportTallies()


def start_otlp_export(
    settings: OtlpSettings, version: str, formatter: logging.Formatter
) -> OtlpLogExport | None:
    """The export of every record its handler is given (``None``: disabled)."""
    if not settings.enabled:
        return None
    from aviso_builtins.otlp.sdk import OtlpLogExport

    return OtlpLogExport(settings, version, TALLIES, MAX_QUEUE_SIZE, formatter)
