"""Configuration documents used across the suite."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import yaml

# The API example schemas, with enough in-memory history for the tests.
API_EXAMPLE = yaml.safe_load(
    """
application:
  host: 127.0.0.1
  port: 0
  base_url: "https://aviso.example.org"
notification_backend:
  kind: in_memory
  in_memory:
    max_history_per_topic: 1000
    max_topics: 10000
notification_schema:
  river_gauge:
    payload: { required: false }
    topic: { base: "gauge", key_order: ["basin", "date", "level"] }
    identifier:
      basin: { type: StringHandler, required: true }
      date:  { type: DateHandler, canonical_format: "%Y%m%d", required: false }
      level: { type: IntHandler, range: [0, 10], required: false }
  storm_cell:
    payload: { required: true }
    topic: { base: "storm", key_order: ["date", "time"] }
    identifier:
      date:    { type: DateHandler, canonical_format: "%Y%m%d", required: false }
      time:    { type: TimeHandler, required: false }
      polygon: { type: PolygonHandler, required: true }
watch_endpoint:
  sse_heartbeat_interval_sec: 30
  connection_max_duration_sec: 900
  replay_batch_size: 100
  max_historical_notifications: 10000
  replay_batch_delay_ms: 100
  concurrent_notification_processing: 15
"""
)


def with_changes(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with whole top-level sections updated key by key."""
    document = copy.deepcopy(base)
    for name, values in sections.items():
        current = document.get(name)
        if isinstance(current, dict) and isinstance(values, dict):
            current.update(values)
        else:
            document[name] = values
    return document


BACKENDS = ("in_memory", "jetstream")
"""The storage backends the conformance suites run against."""

ForBackend = Callable[[Mapping[str, Any]], dict[str, Any]]
"""A configuration document -> its variant for the backend under test (see ``for_backend``)."""


def jetstream_variant(document: Mapping[str, Any], nats_url: str) -> dict[str, Any]:
    """``document`` (deep-copied) served by the JetStream backend at ``nats_url``.

    Every schema with a ``topic`` block also gets ``storage_policy.allow_duplicates: true``
    (unless it sets the flag itself): JetStream keeps only the newest message per subject by
    default, while the suites' in-memory configurations keep 1000 per topic, so this keeps the
    history both backends expose equal. Schemas without ``topic`` (and schema-less event types
    in permissive mode) cannot carry a storage policy and keep one message per subject.
    """
    variant = copy.deepcopy(dict(document))
    variant["notification_backend"] = {"kind": "jetstream", "jetstream": {"nats_url": nats_url}}
    for schema in (variant.get("notification_schema") or {}).values():
        if isinstance(schema, dict) and "topic" in schema:
            policy = schema.get("storage_policy") or {}
            schema["storage_policy"] = {"allow_duplicates": True, **policy}
    return variant
