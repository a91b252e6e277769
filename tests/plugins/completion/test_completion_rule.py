"""The ``completion`` key: validated by its plugin, one line naming the key at fault, and
the event type it derives added to the configuration like a written one."""

from __future__ import annotations

from typing import Any

import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.plugins import discover
from tests.plugins.completion.support import config


def load(document: dict[str, Any]) -> Any:
    return settings_from_document(document, discover(load_entry_points=False))


def test_the_rule_derives_its_event_type() -> None:
    settings = load(config())
    derived = settings.schemas["ens_complete"]
    assert derived.topic is not None
    assert derived.topic.base == "ens_complete"
    assert list(derived.topic.key_order) == ["run", "step", "status"]
    assert derived.identifier["run"] == {"type": "StringHandler", "required": False}
    assert derived.identifier["step"] == {"type": "IntHandler", "required": False}
    assert derived.identifier["status"] == {
        "type": "EnumHandler",
        "values": ["complete", "incomplete"],
        "required": False,
    }
    assert "member" not in derived.identifier


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"member": "membr"},
            "notification_schema.ens.completion.member: 'membr' is not a field of the "
            r"identifier \(run, step, member\)",
        ),
        (
            {"group_by": ["run", "stp"]},
            r"notification_schema.ens.completion.group_by\[1\]: 'stp' is not a field",
        ),
        (
            {"expected_values": [0, 1]},
            "notification_schema.ens.completion: give exactly one of expected_count and "
            "expected_values",
        ),
        (
            {"expected_count": None},
            "notification_schema.ens.completion: give exactly one of expected_count and "
            "expected_values",
        ),
        ({"group_by": ["run", "member"]}, "completion.member: 'member' is also in group_by"),
        ({"event_type": "ens"}, "derives event type 'ens', which is already configured"),
        ({"deadline_seconds": 0}, "notification_schema.ens.completion.deadline_seconds"),
        (
            {"deadline_seconds": float("nan")},
            "notification_schema.ens.completion.deadline_seconds: must be a finite number",
        ),
        (
            {"deadline_seconds": float("inf")},
            "notification_schema.ens.completion.deadline_seconds: must be a finite number",
        ),
        (
            {"expected_count": None, "expected_values": [0, float("nan")]},
            r"notification_schema.ens.completion.expected_values\[1\]: must be a finite number",
        ),
        (
            {"expected_count": None, "expected_values": [0, 1, "seven"]},
            r"notification_schema.ens.completion.expected_values\[2\]: \"seven\" is not a value "
            r"of 'member' \(IntHandler\): Field 'member' must be a valid integer",
        ),
        (
            {"expected_count": None, "expected_values": [0, 1.5]},
            r"notification_schema.ens.completion.expected_values\[1\]: 1.5 is not a value of "
            r"'member' \(IntHandler\)",
        ),
        ({"colour": "red"}, "notification_schema.ens.completion"),
    ],
)
def test_a_broken_rule_is_one_line_naming_the_key(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        load(config(**rule))
    assert "\n" not in str(raised.value)
