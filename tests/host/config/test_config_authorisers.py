"""What the host does with a stream authoriser's claimed section and configuration check."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.settings import Settings
from aviso_host.plugins import PluginError
from aviso_plugins.types import (
    AuthoriserConfiguration,
    Caller,
    ConfigurationProblem,
    StreamAuthoriser,
)
from tests.host.config.config_stubs import AUTH_ENABLED, make_registry, with_schema

SEEN: list[AuthoriserConfiguration] = []


class Quota(StreamAuthoriser):
    """Claims ``quota``; refuses a limit above the number of declared identifier fields."""

    name: ClassVar[str] = "quota"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "limit": {"type": "integer", "default": 1},
            "label": {"type": "string", "default": "q"},
        },
    }

    @classmethod
    def check_configuration(
        cls, configuration: AuthoriserConfiguration
    ) -> Sequence[ConfigurationProblem]:
        SEEN.append(configuration)
        limit = configuration.options["limit"]
        if limit < 0:
            raise RuntimeError("negative")
        for event_type in configuration.streams:
            if limit > len(configuration.schemas[event_type]["identifier"]):
                raise ConfigurationProblem((cls.name, "limit"), "above the field count")
        return [ConfigurationProblem((), "quota is experimental")]

    async def authorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        return None


class ClaimsAuth(Quota):
    name: ClassVar[str] = "auth"


def load(doc: dict[str, Any], authoriser: type[StreamAuthoriser] = Quota) -> Settings:
    registry = make_registry()
    registry = dataclasses.replace(
        registry, authorisers={**registry.authorisers, authoriser.name: authoriser}
    )
    return settings_from_document(doc, registry)


def quota_document(**section: Any) -> dict[str, Any]:
    doc = with_schema(auth={"required": True, "plugins": ["quota"]})
    doc["auth"] = AUTH_ENABLED
    if section:
        doc["quota"] = section
    return doc


def test_defaults_fill_the_absent_keys_and_the_check_sees_everything() -> None:
    SEEN.clear()
    settings = load(quota_document(limit=2))
    assert settings.authorisers["quota"] == {"limit": 2, "label": "q"}
    (configuration,) = SEEN
    assert configuration.configured is True
    assert configuration.streams == ("river_gauge",)
    assert "river_gauge" in configuration.schemas
    assert "StringHandler" in configuration.field_handlers
    assert settings.warnings[-1] == "quota is experimental"


def test_an_absent_section_is_all_defaults() -> None:
    SEEN.clear()
    settings = load(quota_document())
    assert settings.authorisers["quota"] == {"limit": 1, "label": "q"}
    assert SEEN[0].configured is False


def test_the_section_shape_is_checked_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^quota\.limit: .many. is not an integer"):
        load(quota_document(limit="many"))
    with pytest.raises(ConfigError, match=r"^quota: unknown key 'colour'"):
        load(quota_document(colour="red"))


def test_a_configuration_problem_names_its_key() -> None:
    with pytest.raises(ConfigError, match=r"^quota\.limit: above the field count$"):
        load(quota_document(limit=99))


def test_any_other_exception_from_the_check_is_one_line_naming_the_authoriser() -> None:
    with pytest.raises(
        ConfigError, match=r"^quota: stream authoriser 'quota' failed checking its .*negative$"
    ):
        load(quota_document(limit=-1))


def test_the_check_runs_only_when_a_stream_lists_the_authoriser() -> None:
    SEEN.clear()
    doc = quota_document(limit=99)
    del doc["notification_schema"]["river_gauge"]["auth"]
    load(doc)
    assert SEEN == []


def test_a_host_section_cannot_be_claimed() -> None:
    with pytest.raises(PluginError, match="claims the configuration section 'auth'"):
        load(quota_document(), ClaimsAuth)
