"""The hooks through which a plugin adds to the whole server process, as a third-party plugin
uses them: a settings section anywhere in the configuration (validated, converted, checked,
shown with its defaults), log handlers (given every record, closed when serving ends) and
process-wide Prometheus collectors (in every service's registry)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import Counter

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.config.build import with_declared_defaults
from aviso_host.plugins import BLOCK_ENV, PluginError, discover
from aviso_host.worker import plugin_log_handlers
from aviso_plugins import hookimpl
from aviso_plugins.process import LogSetup, SettingsSection
from aviso_plugins.shapes import shape, shape_schema
from aviso_plugins.testing import build_app
from aviso_plugins.types import ConfigurationProblem

SHIPPED = Counter("test_shipper_records", "Records a test plugin shipped", registry=None)


@shape()
@dataclass(frozen=True, slots=True)
class ShipperOptions:
    port: int = 514
    target: str = ""


def _check(section: Mapping[str, Any]) -> Sequence[ConfigurationProblem]:
    if section.get("target") == "refused":
        raise ConfigurationProblem(("logging", "shipper", "target"), "is refused")
    if section.get("target") == "odd":
        return [ConfigurationProblem(("logging", "shipper", "target"), "is odd")]
    return []


class Kept(logging.Handler):
    def __init__(self, setup: LogSetup) -> None:
        super().__init__()
        self.setup = setup
        self.messages: list[str] = []
        self.closed = False

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def close(self) -> None:
        self.closed = True
        super().close()


class Shipper:
    """Declares ``logging.shipper``, ships records while it has a target, counts them."""

    def __init__(self, path: tuple[str, ...] = ("logging", "shipper")) -> None:
        self.section = SettingsSection(path, shape_schema(ShipperOptions), _check)
        self.handlers: list[Kept] = []

    @hookimpl
    def aviso_settings_sections(self) -> list[SettingsSection]:
        return [self.section]

    @hookimpl
    def aviso_log_handlers(self, setup: LogSetup) -> list[logging.Handler]:
        if not self.section.options(setup.configuration).get("target"):
            return []
        self.handlers.append(Kept(setup))
        return [self.handlers[-1]]

    @hookimpl
    def aviso_metrics(self) -> list[Counter]:
        return [SHIPPED]


def document(**sections: Any) -> dict[str, Any]:
    return {
        "application": {"host": "127.0.0.1", "port": 8000},
        "notification_backend": {"kind": "in_memory"},
        **sections,
    }


def settings(plugin: Shipper, **sections: Any) -> Any:
    return settings_from_document(document(**sections), discover(extra=[plugin]))


def test_a_declared_section_is_validated_and_converted_as_the_hosts() -> None:
    with pytest.raises(ConfigError, match=r"^logging\.shipper\.port: "):
        settings(Shipper(), logging={"shipper": {"port": "not a number"}})
    read = settings(Shipper(), logging={"shipper": {"port": 601, "tagret": "x"}})
    assert read.document["logging"] == {"shipper": {"port": 601, "tagret": "x"}}
    assert any("logging.shipper.tagret" in line and "target" in line for line in read.unknown)


def test_without_the_plugin_the_section_is_an_unknown_key() -> None:
    read = settings_from_document(document(logging={"shipper": {}}), discover())
    assert any("logging.shipper" in line for line in read.unknown)


def test_a_declared_sections_check_refuses_or_warns() -> None:
    with pytest.raises(ConfigError) as refused:
        settings(Shipper(), logging={"shipper": {"target": "refused"}})
    assert str(refused.value) == "logging.shipper.target: is refused"
    warned = settings(Shipper(), logging={"shipper": {"target": "odd"}})
    assert "logging.shipper.target: is odd" in warned.warnings


def test_the_defaults_show_the_declared_sections_defaults() -> None:
    plugin = Shipper()
    read = settings(plugin)
    assert "logging" not in read.document
    filled = with_declared_defaults(read.document, discover(extra=[plugin]))
    assert filled["logging"]["shipper"] == {"port": 514, "target": ""}
    assert filled["logging"]["level"] == "info"


def test_a_section_claimed_twice_or_the_hosts_fails_startup() -> None:
    with pytest.raises(
        PluginError, match=r"both declare the configuration section 'logging\.shipper'"
    ):
        settings_from_document(document(), discover(extra=[Shipper(), Shipper()]))
    with pytest.raises(PluginError, match=r"'logging\.level', which the host owns"):
        settings(Shipper(("logging", "level")))


def test_log_handlers_get_every_record_until_serving_ends() -> None:
    plugin = Shipper()
    registry = discover(extra=[plugin])
    read = settings_from_document(document(logging={"shipper": {"target": "t"}}), registry)
    with plugin_log_handlers(read, registry):
        (handler,) = plugin.handlers
        assert handler in logging.getLogger().handlers
        logging.getLogger("aviso.test").warning("shipped %s", "once")
    assert "shipped once" in handler.messages
    assert handler not in logging.getLogger().handlers and handler.closed
    assert handler.setup.configuration["logging"]["shipper"]["target"] == "t"
    line = handler.setup.json_formatter.format(
        logging.LogRecord("aviso", logging.INFO, __file__, 1, "as %s", ("json",), None)
    )
    assert '"message":"as json"' in line


def test_no_handler_is_added_where_the_plugin_returns_none() -> None:
    plugin = Shipper()
    registry = discover(extra=[plugin])
    before = list(logging.getLogger().handlers)
    with plugin_log_handlers(settings_from_document(document(), registry), registry):
        assert logging.getLogger().handlers == before
    assert plugin.handlers == []


def test_a_plugins_collectors_are_in_every_services_registry() -> None:
    SHIPPED.inc()
    first, second = (build_app({}, [Shipper()]) for _ in range(2))
    for app in (first, second):
        value = app.state.service.metrics.registry.get_sample_value("test_shipper_records_total")
        assert value is not None and value >= 1


def test_the_builtin_otlp_counters_come_through_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    served = build_app({}).state.service.metrics.registry
    assert served.get_sample_value("aviso_otlp_export_failures_total") is not None
    monkeypatch.setenv(BLOCK_ENV, "otlp_export")
    blocked = settings_from_document(document(logging={"otlp": {"enabled": True}}), discover())
    assert any("logging.otlp" in line for line in blocked.unknown)
