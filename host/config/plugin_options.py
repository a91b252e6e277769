"""The configuration sections plugins own, applied the same way for every plugin kind
(docs/plugins.md, "Plugin options and configuration errors"): for every plugin the
configuration selects, its schema is applied whether or not its section is written, an
absent section checked as ``{}`` and ``"default"`` values filled in; unselected sections
are only shape-checked by the document schema.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from aviso_host.auth.request_view import DEPRECATED_SIGNATURE, takes_authorization_header
from aviso_host.config.coerce import coerce_text
from aviso_host.config.errors import ConfigError, KeyPath, at
from aviso_host.config.redact import mask_secrets, secret_values
from aviso_host.config.shape import validate_shape
from aviso_host.plugins import PluginError, PluginRegistry
from aviso_plugins.process import SettingsSection
from aviso_plugins.types import AuthoriserConfiguration, ConfigurationProblem, StreamAuthoriser

SECRET_ANNOTATION = "writeOnly"
"""A property whose schema has ``"writeOnly": true`` holds a secret (JSON Schema's own
annotation for "accepted, never shown back")."""


@dataclass(frozen=True, slots=True)
class PluginSection:
    path: KeyPath
    schema: Mapping[str, Any]


def selected_sections(document: Mapping[str, Any], registry: PluginRegistry) -> list[PluginSection]:
    """The sections of the plugins this document makes the host construct."""
    sections: list[PluginSection] = []
    auth = document.get("auth")
    if isinstance(auth, Mapping) and auth.get("enabled") is True:
        mode = auth.get("mode", "direct")
        provider = registry.auth_providers.get(mode) if isinstance(mode, str) else None
        if provider is not None and provider.options_schema is not None:
            sections.append(PluginSection(("auth", mode), provider.options_schema))
    backend = document.get("notification_backend")
    kind = backend.get("kind") if isinstance(backend, Mapping) else None
    if isinstance(kind, str) and kind in registry.backends:
        sections.append(
            PluginSection(("notification_backend", kind), registry.backends[kind].options_schema)
        )
    # Stream authorisers' top-level sections are not among them: an authoriser decides
    # itself whether its absent section is an error (``StreamAuthoriser.check_configuration``).
    return sections


def with_plugin_sections(
    document: Mapping[str, Any], registry: PluginRegistry
) -> tuple[dict[str, Any], list[PluginSection]]:
    """``document`` with every selected plugin section present (``{}`` when not written)
    and its defaults filled in; run after text coercion (defaults are typed already),
    before shape validation (so a bad default is reported like a bad value)."""
    result = dict(document)
    sections = selected_sections(result, registry)
    for section in sections:
        parent: dict[Any, Any] = result
        for key in section.path[:-1]:
            child = parent.get(key)
            if not isinstance(child, Mapping):
                break
            parent[key] = parent = dict(child)
        else:
            leaf = section.path[-1]
            current = parent.get(leaf, {})
            parent[leaf] = fill_defaults(current, section.schema)
    schemas = result.get("notification_schema")
    if isinstance(schemas, Mapping):
        result["notification_schema"] = {
            name: _with_handler_defaults(entry, registry) for name, entry in schemas.items()
        }
    return result, sections


def _with_handler_defaults(entry: Any, registry: PluginRegistry) -> Any:
    """A schema entry whose field definitions have their handler's option defaults."""
    identifier = entry.get("identifier") if isinstance(entry, Mapping) else None
    if not isinstance(identifier, Mapping):
        return entry
    fields = {}
    for name, definition in identifier.items():
        handler_type = definition.get("type") if isinstance(definition, Mapping) else None
        handler = (
            registry.field_handlers.get(handler_type) if isinstance(handler_type, str) else None
        )
        fields[name] = (
            fill_defaults(definition, {"properties": handler.options}) if handler else definition
        )
    return {**entry, "identifier": fields}


def without_empty_sections(
    document: Mapping[str, Any], original: Mapping[str, Any], sections: list[PluginSection]
) -> dict[str, Any]:
    """Drop sections :func:`with_plugin_sections` added that stayed empty: the effective
    configuration shows only what was written or defaulted."""
    result = dict(document)
    for section in sections:
        if _lookup(original, section.path) is not None:
            continue
        parent: Any = result
        for key in section.path[:-1]:
            parent = parent.get(key) if isinstance(parent, Mapping) else None
        if isinstance(parent, dict) and parent.get(section.path[-1]) == {}:
            del parent[section.path[-1]]
    return result


def _lookup(document: Mapping[str, Any], path: KeyPath) -> Any:
    node: Any = document
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def fill_defaults(value: Any, schema: Any) -> Any:
    """A copy of ``value`` with every absent property that declares a ``default`` added,
    in nested mappings too."""
    if not isinstance(value, Mapping) or not isinstance(schema, Mapping):
        return value
    properties = schema.get("properties", {})
    filled = {key: fill_defaults(item, properties.get(key)) for key, item in value.items()}
    for key, subschema in properties.items():
        if key not in filled and isinstance(subschema, Mapping) and "default" in subschema:
            filled[key] = copy.deepcopy(subschema["default"])
    return filled


def apply_options_schema(
    options: Mapping[str, Any], schema: Mapping[str, Any], path: KeyPath
) -> dict[str, Any]:
    """Options given outside the configuration file (a sink's): text converted where the
    schema asks for another type, defaults filled in, checked; ``ConfigError`` names
    ``path`` plus the key."""
    try:
        filled: dict[str, Any] = fill_defaults(coerce_text(dict(options), schema, path), schema)
        validate_shape(filled, schema, path)
    except ConfigError as exc:
        raise ConfigError(mask_secrets(str(exc), option_secrets(options, schema))) from None
    return filled


def option_secrets(options: Mapping[str, Any], schema: Mapping[str, Any]) -> frozenset[str]:
    """The text of the secret values among ``options`` (``writeOnly`` or a secret key name)."""
    return secret_values(options, {path for path, _ in secret_locations(options, schema)})


def secret_locations(value: Any, schema: Any, path: KeyPath = ()) -> Iterator[tuple[KeyPath, Any]]:
    """Every value of ``value`` whose schema is marked ``writeOnly``, with its key path.

    Follows ``properties``, ``additionalProperties`` and ``items``: the places a plugin
    section declares its keys.
    """
    if not isinstance(schema, Mapping):
        return
    if schema.get(SECRET_ANNOTATION) is True:
        yield path, value
        return
    if isinstance(value, Mapping):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            yield from secret_locations(item, properties.get(key, extra), (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from secret_locations(item, schema.get("items"), (*path, index))


def declared_sections(registry: PluginRegistry) -> tuple[SettingsSection, ...]:
    """The sections plugins declare through ``aviso_settings_sections``, each claimed once."""
    if registry.manager is None:
        return ()
    owners: dict[str, str] = {}
    sections: list[SettingsSection] = []
    for impl in registry.manager.hook.aviso_settings_sections.get_hookimpls():
        try:
            declared = list(cast("Iterable[SettingsSection]", impl.function() or ()))
        except Exception as exc:
            raise PluginError(
                f"plugin '{impl.plugin_name}': aviso_settings_sections() raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        for section in declared:
            previous = owners.setdefault(section.key, impl.plugin_name)
            if previous != impl.plugin_name:
                raise PluginError(
                    f"plugins '{previous}' and '{impl.plugin_name}' both declare the "
                    f"configuration section '{section.key}'"
                )
            sections.append(section)
    return tuple(sections)


def place_sections(properties: dict[str, Any], sections: tuple[SettingsSection, ...]) -> None:
    """Each declared section's schema at its path in the document schema's ``properties``;
    never over a key the host declares."""
    for section in sections:
        node = properties
        for key in section.path[:-1]:
            parent = node.setdefault(key, {"type": "object", "properties": {}})
            node = parent.setdefault("properties", {})
        if section.path[-1] in node:
            raise PluginError(
                f"a plugin declares the configuration section '{section.key}', which the host owns"
            )
        node[section.path[-1]] = dict(section.schema)


def section_warnings(document: Mapping[str, Any], registry: PluginRegistry) -> list[str]:
    """Each declared section's ``check``: a :class:`ConfigurationProblem` raised fails, one
    returned is a warning."""
    warnings: list[str] = []
    for section in declared_sections(registry):
        if section.check is None:
            continue
        try:
            found = section.check(section.options(document))
        except ConfigurationProblem as problem:
            raise at(problem.path, problem.message) from problem
        warnings += [str(at(problem.path, problem.message)) for problem in found]
    return warnings


# -- top-level sections claimed by stream authorisers: an authoriser declaring
# ``options_schema`` owns the top-level section named after it. The host validates its shape
# with the rest of the document, fills in the schema's top-level defaults and runs the
# class's ``check_configuration`` when some stream lists it; an unused section is merely
# shape-checked, so a half-written one does not block a deployment that does not use it.


def claimed_sections(registry: PluginRegistry, reserved: Collection[str]) -> dict[str, Any]:
    """Section name -> schema for every authoriser that claims one; never a host section."""
    sections: dict[str, Any] = {}
    for name, cls in sorted(registry.authorisers.items()):
        if cls.options_schema is None:
            continue
        if name in reserved:
            raise PluginError(
                f"stream authoriser {name!r} claims the configuration section {name!r}, "
                "which the host owns"
            )
        sections[name] = dict(cls.options_schema)
    return sections


def authoriser_options(cls: type[StreamAuthoriser], document: Mapping[str, Any]) -> dict[str, Any]:
    """The options ``cls`` is constructed with: its section over its schema's defaults."""
    section = document.get(cls.name)
    given = dict(section) if isinstance(section, Mapping) else {}
    if cls.options_schema is None:
        return given
    properties = cls.options_schema.get("properties", {})
    defaults = {
        key: schema["default"]
        for key, schema in properties.items()
        if isinstance(schema, Mapping) and "default" in schema
    }
    return {**defaults, **given}


def check_authorisers(document: Mapping[str, Any], registry: PluginRegistry) -> list[str]:
    """Run each used authoriser's own rules, in name order; return their warnings."""
    schemas = document.get("notification_schema", {})
    warnings: list[str] = []
    for name, cls in sorted(registry.authorisers.items()):
        streams = tuple(
            event_type
            for event_type, schema in schemas.items()
            if name in schema.get("auth", {}).get("plugins", ())
        )
        if not streams:
            continue
        configuration = AuthoriserConfiguration(
            options=authoriser_options(cls, document),
            configured=name in document,
            streams=streams,
            schemas=schemas,
            field_handlers=registry.field_handlers,
        )
        try:
            found = cls.check_configuration(configuration)
        except ConfigurationProblem as problem:
            raise at(problem.path, problem.message) from problem
        except Exception as exc:
            raise at(
                (name,),
                f"stream authoriser {name!r} failed checking its configuration: "
                f"{type(exc).__name__}: {exc}",
            ) from exc
        warnings += [str(at(problem.path, problem.message)) for problem in found]
    return warnings


def deprecation_warnings(document: Mapping[str, Any], registry: PluginRegistry) -> list[str]:
    """Plugins the host still supports through an adapter, named for the operator."""
    auth = document.get("auth", {})
    provider = registry.auth_providers.get(auth.get("mode", "direct"))
    if auth.get("enabled", False) and provider and takes_authorization_header(provider):
        return [
            f"auth.mode: {DEPRECATED_SIGNATURE.format(mode=provider.mode)} "
            f"({registry.describe('auth_providers', provider.mode)})"
        ]
    return []
