"""Top-level configuration sections claimed by stream authoriser plugins, and their checks.

An authoriser declaring ``options_schema`` owns the top-level section named after it: the
host validates its shape with the rest of the document, fills in the schema's top-level
defaults and runs the class's ``check_configuration`` when some stream lists it. An unused
section is merely shape-checked, so a half-written one does not block a deployment that
does not use it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from aviso_host.config.errors import at
from aviso_host.plugins import PluginError, PluginRegistry
from aviso_plugins.types import AuthoriserConfiguration, ConfigurationProblem, StreamAuthoriser


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
