"""The CloudEvent envelope of a delivered notification, rendered once per stored record."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aviso_host.encoding import dumps
from aviso_host.filtering import stored_coordinates
from aviso_host.identifiers import SPATIAL_METADATA
from aviso_host.schemas import SchemaCatalog
from aviso_plugins.topics import TopicDecodeError, decode_topic
from aviso_plugins.types import ACTOR_METADATA, StoredNotification

# Characters of the canonical stored form of a polygon or point cloud, ``[[lat,lon],...]``
# with float numbers. Text made of nothing else holds no quote, escape or brace, so it can
# be inserted into JSON as it stands; the check costs a tenth of a regular expression's on
# 60 KiB (replay renders up to 100 such records per batch on the event loop).
_CANONICAL_CHARACTERS = str.maketrans("", "", "0123456789.-+e,[]")


def _canonical_array(text: str) -> bool:
    return (
        text.startswith("[[") and text.endswith("]]") and not text.translate(_CANONICAL_CHARACTERS)
    )


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


def _publisher(record: StoredNotification) -> str:
    """The ``publisher`` extension member with its trailing comma, or nothing.

    The stored value is re-parsed rather than spliced: another writer's header could hold
    anything, and an unusable one is left out instead of breaking the event.
    """
    stored = record.metadata.get(ACTOR_METADATA)
    if not stored:
        return ""
    try:
        username = json.loads(stored)
    except ValueError:
        return ""
    if not isinstance(username, str) or not username:
        return ""
    return f'"publisher":{dumps(username)},'


def spatial_output(value: str) -> Any:
    """A stored spatial value as delivered: ``[[lat, lon], ...]`` numbers (the stored text
    when it cannot be read as coordinates, e.g. another writer's)."""
    coordinates = stored_coordinates(value)
    return value if coordinates is None else coordinates[:, ::-1].tolist()


def with_spatial_arrays(identifier: str, metadata: Mapping[str, str], keys: Sequence[str]) -> str:
    """The stored identifier JSON with the spatial values put back as JSON arrays.

    Spatial values are stored apart (``spatial_geometry``, ``spatial_point_cloud``); older
    records also hold them, as text, in the identifier. A value in the canonical form is
    inserted as it is: polygons may have 10,000 vertices and this is the replay hot path.
    """
    try:
        values = json.loads(identifier)
    except ValueError:
        return identifier
    if not isinstance(values, dict):
        return identifier
    arrays: dict[str, str] = {}
    for key in keys:
        text = values.pop(key, None)
        if not isinstance(text, str):
            text = metadata.get(SPATIAL_METADATA.get(key, ""))
        if text is None:
            continue
        arrays[key] = text if _canonical_array(text) else dumps(spatial_output(text))
    members = (
        f"{dumps(key)}:{arrays[key] if key in arrays else dumps(values[key])}"
        for key in sorted({*values, *arrays})
    )
    return "{" + ",".join(members) + "}"


class CloudEventRenderer:
    """Renders CloudEvents by splicing pre-encoded parts: this is the hot path of replay.

    The stored identifier (metadata written by this service) and the stored payload are
    already canonical compact JSON with sorted keys, so they are inserted as they are; only
    records from other writers are parsed and re-encoded.
    """

    def __init__(self, catalog: SchemaCatalog, base_url: str) -> None:
        self._catalog = catalog
        self._base_url = base_url
        self._source = dumps(base_url)
        self._parts: dict[str, tuple[str, str, str]] = {}

    def render(self, record: StoredNotification) -> bytes:
        """The compact JSON of the CloudEvent; cached on the record for every other stream."""
        if record.rendered is None:
            record.rendered = self._build(record).encode()
        return record.rendered

    def _event_parts(self, event_type: str) -> tuple[str, str, str]:
        parts = self._parts.get(event_type)
        if parts is None:
            quoted = dumps(event_type)[1:-1]
            parts = self._parts[event_type] = (
                dumps(f"{self._base_url}/schema/{event_type}"),
                quoted,
                dumps(f"int.ecmwf.aviso.{event_type}"),
            )
        return parts

    def _build(self, record: StoredNotification) -> str:
        event_type = self._catalog.event_type_of(record.topic)
        if event_type is None:
            raise CloudEventError("Failed to determine event type from topic")
        dataschema, quoted_type, type_ = self._event_parts(event_type)
        identifier = record.metadata.get("identifier")
        if identifier:
            payload = record.payload or "null"
            schema = self._catalog.get(event_type)
            if schema is not None and schema.spatial_keys:
                identifier = with_spatial_arrays(identifier, record.metadata, schema.spatial_keys)
        else:
            identifier = dumps(self._rebuilt_identifier(record, event_type))
            payload = dumps(_payload(record.payload))
        sequence = record.sequence
        return (
            f'{{"data":{{"identifier":{identifier},"payload":{payload}}},'
            f'"datacontenttype":"application/json","dataschema":{dataschema},'
            f'"id":"{quoted_type}@{sequence}",{_publisher(record)}"sequence":{sequence},'
            f'"source":{self._source},'
            f'"specversion":"1.0","time":"{format_time(record.time_ns)}","type":{type_}}}'
        )

    def _rebuilt_identifier(self, record: StoredNotification, event_type: str) -> dict[str, Any]:
        """Records written without identifier metadata: rebuild it from the topic tokens."""
        schema = self._catalog.get(event_type)
        if schema is None:
            return {}
        try:
            tokens = decode_topic(record.topic)[1:]
        except TopicDecodeError as exc:
            raise CloudEventError("Failed to decode topic") from exc
        rebuilt: dict[str, Any] = {
            key: value for key, value in zip(schema.topic_fields, tokens, strict=False) if value
        }
        for key in schema.spatial_keys:
            text = record.metadata.get(SPATIAL_METADATA.get(key, "")) or rebuilt.get(key)
            if text is not None:
                rebuilt[key] = spatial_output(text)
        return rebuilt
