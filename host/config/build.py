"""From a configuration document to typed, immutable :class:`Settings`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from aviso_host.config.coerce import coerce_text, drop_nulls
from aviso_host.config.document_schema import document_schema
from aviso_host.config.errors import ConfigError, KeyPath, at
from aviso_host.config.plugin_options import (
    authoriser_options,
    declared_sections,
    deprecation_warnings,
    fill_defaults,
    secret_locations,
    selected_sections,
    with_plugin_sections,
    without_empty_sections,
)
from aviso_host.config.redact import mask_secrets, secret_values
from aviso_host.config.rules import STORAGE_POLICY_KEYS, check_rules
from aviso_host.config.settings import (
    SECTIONS,
    ApplicationSettings,
    AuthSettings,
    BackendSettings,
    LimitSettings,
    LoggingSettings,
    MetricsSettings,
    SchemaSettings,
    Settings,
    StreamAuthSettings,
    TopicSettings,
    WatchSettings,
)
from aviso_host.config.shape import validate_shape
from aviso_host.config.unknown_keys import unknown_key_paths, unknown_key_warnings
from aviso_host.plugins import PluginRegistry
from aviso_plugins.auth import ConfigurationProblem
from aviso_plugins.shapes import ShapeError, read_shape, shape_schema

T = TypeVar("T")


def settings_from_document(
    document: Mapping[str, Any],
    registry: PluginRegistry,
    overrides: Mapping[str, KeyPath] | None = None,
) -> Settings:
    """Validate ``document`` against the loaded plugins; raise ``ConfigError`` if unusable.

    ``overrides``: the ``AVISOSERVER_*`` variables applied to ``document`` and the key path
    each one set, so that one addressing no key is reported under its own name."""
    schema = document_schema(registry)
    written = drop_nulls(document)
    # Found before any check, so that no error message can quote a secret value.
    secret_paths = _secret_paths(written, schema)
    named = frozenset(section.path for section in selected_sections(written, registry))
    secrets = secret_values(written, secret_paths, named)
    try:
        return _settings(written, schema, registry, secrets, overrides)
    except ConfigError as exc:
        raise ConfigError(mask_secrets(str(exc), secrets)) from None


def _settings(
    written: Mapping[str, Any],
    schema: Mapping[str, Any],
    registry: PluginRegistry,
    secrets: frozenset[str],
    overrides: Mapping[str, KeyPath] | None,
) -> Settings:
    effective, sections = with_plugin_sections(coerce_text(written, schema), registry)
    validate_shape(effective, schema)
    derived = with_derived_schemas(effective, registry)
    if derived is not effective:
        effective = dict(derived)
        validate_shape(effective, schema)
    effective = without_empty_sections(effective, written, sections)
    # Again on the effective document: defaults may hold secrets too.
    secret_paths = _secret_paths(effective, schema)
    named = frozenset(section.path for section in sections)
    secrets |= secret_values(effective, secret_paths, named)
    unknown = unknown_key_warnings(effective, schema, overrides)
    warnings = [*unknown, *check_rules(effective, registry)]
    warnings += deprecation_warnings(effective, registry)
    schemas = effective.get("notification_schema", {})
    auth = effective.get("auth", {})
    strict = effective.get("notification_schema_strict", bool(schemas))
    if strict is False and schemas:
        warnings.append(
            "notification_schema_strict is false: undeclared event types are processed "
            "generically although schemas are configured"
        )
    return Settings(
        application=_typed(ApplicationSettings, effective["application"], "application"),
        backend=_backend(effective["notification_backend"]),
        logging=_typed(LoggingSettings, effective.get("logging", {}), "logging"),
        auth=replace(
            _typed(AuthSettings, auth, "auth"),
            mode_options=auth.get(auth.get("mode", "direct"), {}),
        ),
        metrics=_typed(MetricsSettings, effective.get("metrics", {}), "metrics"),
        watch=_typed(WatchSettings, effective.get("watch_endpoint", {}), "watch_endpoint"),
        limits=_typed(LimitSettings, effective.get("limits", {}), "limits"),
        schemas={name: _schema(name, entry) for name, entry in schemas.items()},
        schemas_configured="notification_schema" in effective,
        strict=strict,
        authorisers={
            name: authoriser_options(cls, effective) for name, cls in registry.authorisers.items()
        },
        document=effective,
        warnings=tuple(warnings),
        unknown=tuple(unknown),
        secret_paths=secret_paths,
        plugin_sections=named,
        secrets=secrets,
    )


def with_derived_schemas(
    document: Mapping[str, Any], registry: PluginRegistry
) -> Mapping[str, Any]:
    """``document`` with every event type the plugins' schema keys derive in
    ``notification_schema`` (itself when no entry has a plugin's key), to be validated like
    written ones; raises ``ConfigError`` naming the key at fault."""
    schemas: Mapping[str, Any] = document.get("notification_schema") or {}
    derived: dict[str, Any] = {}
    for event_type, entry in schemas.items():
        for key, cls in sorted(registry.schema_keys.items()):
            if not isinstance(entry, Mapping) or key not in entry:
                continue
            path = ("notification_schema", event_type, key)
            try:
                added = cls(registry.field_handlers).derived_schemas(event_type, entry, entry[key])
            except ConfigurationProblem as problem:
                raise at((*path, *problem.path), problem.message) from None
            for name, added_entry in added.items():
                if name in schemas or name in derived:
                    raise at(path, f"derives event type '{name}', which is already configured")
                derived[name] = dict(added_entry)
    if not derived:
        return document
    return {**document, "notification_schema": {**schemas, **derived}}


def with_declared_defaults(
    document: Mapping[str, Any], registry: PluginRegistry | None = None
) -> dict[str, Any]:
    """``document`` with the declared default of every host setting it does not write, and
    of every section ``registry``'s plugins declare: the values the server runs with."""
    result = dict(document)
    for name, cls in SECTIONS.items():
        result[name] = fill_defaults(result.get(name, {}), shape_schema(cls))
    for section in declared_sections(registry) if registry is not None else ():
        parent = result
        for key in section.path[:-1]:
            child = parent.get(key)
            parent[key] = parent = dict(child) if isinstance(child, Mapping) else {}
        parent[section.path[-1]] = fill_defaults(parent.get(section.path[-1], {}), section.schema)
    return result


def _secret_paths(document: Mapping[str, Any], schema: Mapping[str, Any]) -> frozenset[KeyPath]:
    """Where ``document`` holds secrets: values marked ``writeOnly`` and unknown keys' values
    (nobody reads them, so nothing is lost by never showing them)."""
    marked = frozenset(path for path, _ in secret_locations(document, schema))
    return marked | unknown_key_paths(document, schema)


def _typed(cls: type[T], values: Mapping[str, Any], *path: str) -> T:
    """``values`` (at ``path``) read as ``cls``; a value its schema admits but that cannot be
    typed (an integer too large for a float) fails naming its key, like any other."""
    try:
        return read_shape(cls, values)
    except ShapeError as exc:
        raise at((*path, *exc.path), exc.reason) from None


def _backend(section: Mapping[str, Any]) -> BackendSettings:
    sections = {
        kind: options
        for kind, options in section.items()
        if kind != "kind" and isinstance(options, Mapping)
    }
    return BackendSettings(kind=section["kind"], sections=sections)


def _schema(event_type: str, entry: Mapping[str, Any]) -> SchemaSettings:
    path = ("notification_schema", event_type)
    topic = entry.get("topic")
    stream_auth = entry.get("auth")
    policy = entry.get("storage_policy")
    return SchemaSettings(
        event_type=event_type,
        identifier=entry["identifier"],
        topic=_typed(TopicSettings, topic, *path, "topic") if topic else None,
        payload_required=entry["payload"]["required"] if "payload" in entry else None,
        auth=(
            _typed(StreamAuthSettings, stream_auth, *path, "auth")
            if stream_auth is not None
            else None
        ),
        # Unknown storage_policy keys are ignored, so backends never see them.
        storage_policy=(
            {key: policy[key] for key in STORAGE_POLICY_KEYS if key in policy}
            if policy is not None
            else None
        ),
        max_historical_notifications=entry.get("max_historical_notifications"),
    )
