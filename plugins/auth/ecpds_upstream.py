"""Asking the ECPDS servers for a user's destinations.

Every configured server is asked in parallel, once (no retries); each answer is classified
with the contract's outcome labels and the successes are merged by union under the
partial-outage policy.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

if TYPE_CHECKING:
    # httpx is imported by the code that calls upstream: discovering plugins
    # (`aviso-server --help`) imports this module and has no use for httpx.
    import httpx

SUCCESS = "success"
# Failure labels, worst first: the merged failure reports the worst one seen.
FAILURE_LABELS = (
    "http_401",
    "http_403",
    "http_4xx",
    "invalid_response",
    "http_5xx",
    "unreachable",
)
LIST_PATH = "/ecpds/v1/destination/list"

logger = logging.getLogger("aviso.ecpds")


class LookupFailed(Exception):
    """No verdict could be reached under the policy; ``outcome`` is the worst label."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


@dataclass(frozen=True, slots=True)
class ServerAnswer:
    outcome: str
    destinations: frozenset[str] = frozenset()


def list_url(server: str, username: str) -> str:
    """``<server>/ecpds/v1/destination/list?id=<form-encoded username>``."""
    return server.rstrip("/") + LIST_PATH + "?" + urlencode({"id": username})


def destinations_of(body: bytes, target_field: str) -> frozenset[str] | None:
    """The active destinations of a 2xx body, or ``None`` when it breaks the contract."""
    try:
        document: Any = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    success = document.get("success")
    records = document.get("destinationList")
    if not isinstance(success, str) or success != "yes" or not isinstance(records, list):
        return None
    return frozenset(
        record[target_field]
        for record in records
        if isinstance(record, dict)
        and record.get("active") is True
        and isinstance(record.get(target_field), str)
    )


def classify_status(status: int) -> str:
    if status == 401:
        return "http_401"
    if status == 403:
        return "http_403"
    if 400 <= status < 500:
        return "http_4xx"
    return "http_5xx"


async def ask_server(
    client: httpx.AsyncClient,
    server: str,
    username: str,
    target_field: str,
    deadline_seconds: float,
) -> ServerAnswer:
    import httpx  # deferred: see the imports at the top

    try:
        async with asyncio.timeout(deadline_seconds):
            response = await client.get(list_url(server, username))
    except (httpx.HTTPError, httpx.InvalidURL, TimeoutError) as exc:
        logger.warning("ECPDS server %s unreachable: %s", server, type(exc).__name__)
        return ServerAnswer("unreachable")
    if not response.is_success:
        logger.warning("ECPDS server %s answered HTTP %d", server, response.status_code)
        return ServerAnswer(classify_status(response.status_code))
    destinations = destinations_of(response.content, target_field)
    if destinations is None:
        logger.warning("ECPDS server %s answered with an invalid body", server)
        return ServerAnswer("invalid_response")
    return ServerAnswer(SUCCESS, destinations)


def merge(answers: Sequence[ServerAnswer], any_success: bool) -> tuple[frozenset[str], str]:
    """The union of the successful answers and the fetch outcome label.

    ``strict`` needs every server; ``any_success`` one. A partial success still reports
    its worst failure as the outcome. Raises :class:`LookupFailed` when the policy fails.
    """
    failures = [answer.outcome for answer in answers if answer.outcome != SUCCESS]
    worst = min(failures, key=FAILURE_LABELS.index) if failures else SUCCESS
    succeeded = [answer for answer in answers if answer.outcome == SUCCESS]
    if not succeeded or (failures and not any_success):
        raise LookupFailed(worst)
    return frozenset().union(*(answer.destinations for answer in succeeded)), worst
