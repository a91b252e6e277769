"""The CloudEvent envelope of a delivered notification, rendered once per stored record."""

from __future__ import annotations

import json
import time
from typing import Any

from aviso_host.encoding import dumps
from aviso_host.filtering import stored_identifier
from aviso_host.schemas import POLYGON, SchemaCatalog
from aviso_plugins.topics import TopicDecodeError, decode_topic
from aviso_plugins.types import StoredNotification


class CloudEventError(ValueError):
    """The record cannot be shown as a CloudEvent (e.g. its topic names no event type)."""


def format_time(time_ns: int) -> str:
    """RFC 3339 UTC with the shortest exact fraction of 0, 3, 6 or 9 digits."""
    seconds, fraction = divmod(time_ns, 1_000_000_000)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    if fraction == 0:
        return stamp + "Z"
    if fraction % 1_000_000 == 0:
        return f"{stamp}.{fraction // 1_000_000:03d}Z"
    if fraction % 1000 == 0:
        return f"{stamp}.{fraction // 1000:06d}Z"
    return f"{stamp}.{fraction:09d}Z"


def _payload(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # legacy non-JSON payloads are delivered as a JSON string


class CloudEventRenderer:
    def __init__(self, catalog: SchemaCatalog, base_url: str) -> None:
        self._catalog = catalog
        self._base_url = base_url

    def render(self, record: StoredNotification) -> bytes:
        """The compact JSON of the CloudEvent; cached on the record for every other stream."""
        if record.rendered is None:
            record.rendered = dumps(self._build(record)).encode()
        return record.rendered

    def _build(self, record: StoredNotification) -> dict[str, Any]:
        event_type = self._catalog.event_type_of(record.topic)
        if event_type is None:
            raise CloudEventError("Failed to determine event type from topic")
        return {
            "data": {
                "identifier": self._identifier(record, event_type),
                "payload": _payload(record.payload),
            },
            "datacontenttype": "application/json",
            "dataschema": f"{self._base_url}/schema/{event_type}",
            "id": f"{event_type}@{record.sequence}",
            "sequence": record.sequence,
            "source": self._base_url,
            "specversion": "1.0",
            "time": format_time(record.time_ns),
            "type": f"int.ecmwf.aviso.{event_type}",
        }

    def _identifier(self, record: StoredNotification, event_type: str) -> dict[str, str]:
        identifier = stored_identifier(record)
        if identifier or "identifier" in record.metadata:
            return identifier
        # Records written without the identifier metadata: rebuild from the topic tokens.
        schema = self._catalog.get(event_type)
        if schema is None:
            return {}
        try:
            tokens = decode_topic(record.topic)[1:]
        except TopicDecodeError as exc:
            raise CloudEventError("Failed to decode topic") from exc
        rebuilt = {
            key: value for key, value in zip(schema.topic_fields, tokens, strict=False) if value
        }
        if "spatial_geometry" in record.metadata:
            rebuilt[POLYGON] = record.metadata["spatial_geometry"]
        return rebuilt
