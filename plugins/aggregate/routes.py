"""POST /api/v1/aggregate: a watch answered with counts grouped by identifier fields.

The request is a watch body plus ``group_by`` (required) and ``debounce_ms`` (optional) and
goes through the watch pipeline step for step; only the error label and code are its own
(``Invalid Aggregate Request`` / ``INVALID_AGGREGATE_REQUEST``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.routing import Route

from aviso_builtins.aggregate.counts import (
    DEFAULT_DEBOUNCE_MS,
    GroupCounts,
    check_debounce,
    plan_group_counts,
)
from aviso_plugins.service import ServiceAccess, TypeLayout

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import ASGIApp

ENDPOINT = "aggregate"
ROUTE = "/api/v1/aggregate"
AGGREGATE_FIELDS = ("group_by", "debounce_ms")


class AggregateRoute:
    """The endpoint of one service: its limits are read once, when the app is built."""

    def __init__(self, service: ServiceAccess) -> None:
        self.service = service
        limits = service.section("limits")
        self.max_groups: int = limits["max_aggregate_groups"]
        self.min_debounce_ms: int = limits["min_aggregate_debounce_ms"]

    def route(self) -> Route:
        endpoint = self.service.stream_endpoint(self.aggregate)
        return Route(ROUTE, endpoint, methods=["POST"])

    def _group_by(self, extras: dict[str, Any]) -> list[str]:
        if "group_by" not in extras:
            raise self.service.missing_member(ENDPOINT, "group_by")
        value = extras["group_by"]
        if not isinstance(value, list):
            raise self.service.invalid_type(ENDPOINT, value, "a sequence")
        for item in value:
            if not isinstance(item, str):
                raise self.service.invalid_type(ENDPOINT, item, "a string")
        return value

    def _debounce_ms(self, extras: dict[str, Any]) -> int:
        # A configured minimum above the default raises the default with it: a request
        # without debounce_ms is never refused.
        value = extras.get("debounce_ms", max(DEFAULT_DEBOUNCE_MS, self.min_debounce_ms))
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.service.invalid_type(ENDPOINT, value, "an integer")
        return value

    async def aggregate(self, request: Request) -> ASGIApp:
        service = self.service
        body = await service.read_stream_request(request, ENDPOINT, AGGREGATE_FIELDS)
        group_by = self._group_by(dict(body.extras))
        debounce_ms = self._debounce_ms(dict(body.extras))

        def counts(layout: TypeLayout | None) -> GroupCounts:
            check_debounce(debounce_ms, self.min_debounce_ms)
            return plan_group_counts(layout, body.identifier, group_by, self.max_groups)

        return await service.summary_stream(
            request,
            body,
            endpoint=ENDPOINT,
            route=ROUTE,
            summarise=counts,
            debounce_ms=debounce_ms,
        )
