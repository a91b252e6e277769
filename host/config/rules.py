"""Semantic startup rules, run on a document that already has the right shape.

The groups run in a fixed order, so when several things
are wrong the operator is told about the earliest one first.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from aviso_host.config.auth_rules import (
    check_global_auth,
    check_plugins_installed,
    check_stream_auth,
    check_stream_plugins,
)
from aviso_host.config.authorisers import check_authorisers
from aviso_host.config.construct import construct
from aviso_host.config.errors import at
from aviso_host.config.ops_rules import (
    check_homepage,
    check_workqueue,
    log_format_warnings,
    replay_cap_warnings,
)
from aviso_host.config.plugin_options import section_warnings
from aviso_host.config.schema_rules import check_schemas
from aviso_host.plugins import PluginRegistry
from aviso_plugins.types import ConfigurationProblem, StorageBackend


def check_rules(document: Mapping[str, Any], registry: PluginRegistry) -> list[str]:
    """Fail on the first violated rule; return warnings worth logging at startup."""
    check_homepage(document["application"])
    sections = section_warnings(document, registry)
    backend = _selected_backend(document["notification_backend"], registry)
    check_workqueue(document)
    schemas = document.get("notification_schema", {})
    warnings = sections + check_schemas(
        schemas,
        registry.field_handlers,
        backend,
        lambda name: registry.describe("field_handlers", name),
    )
    auth = document.get("auth", {})
    check_global_auth(auth)
    check_stream_plugins(schemas, registry.authorisers)
    check_stream_auth(schemas, auth.get("enabled", False))
    _check_metrics(document.get("metrics", {}), document["application"]["port"])
    warnings += check_authorisers(document, registry)
    warnings += replay_cap_warnings(document.get("watch_endpoint", {}))
    warnings += log_format_warnings(document.get("logging", {}))
    check_plugins_installed(auth, set(registry.auth_providers))
    return warnings


def _selected_backend(section: Mapping[str, Any], registry: PluginRegistry) -> type[StorageBackend]:
    kind = section["kind"]
    backend = registry.backends.get(kind)
    if backend is None:
        known = ", ".join(repr(name) for name in sorted(registry.backends)) or "none"
        raise at(
            ("notification_backend", "kind"), f"unknown backend {kind!r} (registered: {known})"
        )
    # The backend's own rules; a plugin defect there is reported like one in its constructor.
    construct(
        partial(_check_options, backend, section.get(kind, {})),
        ("notification_backend", kind),
        registry.describe("backends", kind),
    )
    return backend


def _check_options(backend: type[StorageBackend], options: Mapping[str, Any]) -> None:
    try:
        backend.check_options(options)
    except ConfigurationProblem as problem:
        raise at(problem.path, problem.message) from problem


def _check_metrics(metrics: Mapping[str, Any], application_port: int) -> None:
    if not metrics.get("enabled", False):
        return
    port = metrics.get("port")
    if port is None:
        raise at(("metrics",), "missing required key 'port' (metrics are enabled)")
    if port == 0:
        raise at(("metrics", "port"), "must not be 0 when metrics are enabled")
    if port == application_port:
        raise at(("metrics", "port"), f"must differ from application.port ({application_port})")
