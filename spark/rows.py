"""From a Spark row to a notification: column mapping, JSON values, message ids."""

from __future__ import annotations

import base64
import datetime
import decimal
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Row

from aviso_plugins.types import Notification, NotificationPlanner, SinkRejected

NULL_REJECTION_CODE = "INVALID_NOTIFICATION_REQUEST"
"""The notify API's code for an identifier it cannot accept (a null among them)."""


def json_value(value: Any) -> Any:
    """A Spark value as the JSON value a producer would have sent over HTTP."""
    if isinstance(value, Row):
        return {key: json_value(item) for key, item in value.asDict().items()}
    if isinstance(value, Mapping):
        return {str(key): json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    return value


def message_id(event_type: str, key: str) -> str:
    """64 hex digits: any key text becomes a valid ``Idempotency-Key`` / ``Nats-Msg-Id``."""
    return hashlib.sha256(f"{event_type}\n{key}".encode()).hexdigest()


@dataclass(frozen=True)
class RowMapping:
    """Which columns make the identifier, the payload and the message id."""

    event_type: str
    identifier: tuple[tuple[str, str], ...]
    """(identifier field, column) pairs."""
    payload_columns: tuple[str, ...] = ()
    """Several columns: the payload is an object keyed by column name."""
    payload_column: str | None = None
    """One column: its value is the payload."""
    key_column: str | None = None
    fill_null: tuple[tuple[str, str], ...] = ()
    """(column, value) pairs: the value a null in the column stands for."""

    def notification(
        self,
        row: Row,
        planner: NotificationPlanner,
        defaults: Mapping[str, Any] | None = None,
    ) -> Notification:
        """Validate ``row`` with the host's planner (raises ``SinkRejected``) and build it,
        carrying the plan so that a sink writing to a store does not validate it again.

        A null takes the column's ``fill_null`` value, else (an identifier column) its
        field's schema ``default`` from ``defaults``; a null identifier value left is
        rejected, since notify requires every field of the schema.

        Without a key column the message id hashes the canonical identifier and payload, so
        ``"step": 6`` and ``"step": "06"`` are the same notification, as the server sees it.
        """
        fills = dict(self.fill_null)
        identifier = {}
        for field, column in self.identifier:
            value = row[column]
            if value is None:
                value = fills.get(column, (defaults or {}).get(field))
                if value is None:
                    raise SinkRejected(
                        NULL_REJECTION_CODE,
                        f"Field '{field}' cannot be null (column '{column}'): notify requires "
                        f"every schema field; give the field a 'default' in its schema or "
                        f"the write option fill_null.{column}",
                    )
            identifier[field] = json_value(value)

        def value_of(column: str) -> Any:
            value = row[column]
            return json_value(fills.get(column) if value is None else value)

        if self.payload_column is not None:
            payload = value_of(self.payload_column)
        elif self.payload_columns:
            payload = {column: value_of(column) for column in self.payload_columns}
        else:
            payload = None
        planned = planner.plan(self.event_type, identifier, payload)
        key = (
            str(row[self.key_column])
            if self.key_column is not None and row[self.key_column] is not None
            else f"{planned.metadata['identifier']}\n{planned.payload}"
        )
        return Notification(
            self.event_type, identifier, payload, message_id(self.event_type, key), planned
        )
