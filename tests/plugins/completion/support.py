"""The ensemble schema of the completion tests: 5 members per (run, step)."""

from __future__ import annotations

import copy
from typing import Any

ENS_RULE: dict[str, Any] = {
    "event_type": "ens_complete",
    "group_by": ["run", "step"],
    "member": "member",
    "expected_count": 5,
    "deadline_seconds": 3600,
}
ENS: dict[str, Any] = {
    "topic": {"base": "ens", "key_order": ["run", "step", "member"]},
    "identifier": {
        "run": {"type": "StringHandler", "required": True},
        "step": {"type": "IntHandler", "required": True},
        "member": {"type": "IntHandler", "required": True},
    },
    "completion": ENS_RULE,
}


def config(backend: dict[str, Any] | None = None, **rule: Any) -> dict[str, Any]:
    """A whole configuration with the ``ens`` schema, its rule updated with ``rule``
    (a value ``None`` removes the key)."""
    ens = copy.deepcopy(ENS)
    for key, value in rule.items():
        if value is None:
            ens["completion"].pop(key, None)
        else:
            ens["completion"][key] = value
    return {
        "application": {"host": "127.0.0.1", "port": 0},
        "logging": {"level": "warn"},
        "notification_backend": backend or {"kind": "in_memory"},
        "watch_endpoint": {"replay_batch_delay_ms": 0},
        "notification_schema": {"ens": ens},
    }
