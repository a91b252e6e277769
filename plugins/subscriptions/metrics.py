"""The subscriptions' metrics: how many are held, how far push deliveries lag, and each push
delivery attempt's outcome and latency (no subscription or user names in labels)."""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from aviso_builtins.subscriptions.store import ACTIVE, DISABLED, PULL

DELIVERY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 36000)
DELIVERY_OUTCOMES = ("delivered", "retry", "gone", "dead_lettered")
"""Outcomes of push delivery attempts (``dead_lettered``: a notification given up)."""

SubscriptionCensus = Callable[[], Iterable[tuple[str, str, int | None]]]
"""Each subscription held: its delivery kind, its status, and the storage time (ns) of the
notification its push delivery holds undelivered (``None``: none)."""


class SubscriptionCollector:
    """``aviso_subscriptions`` and ``aviso_subscription_max_lag_seconds``, worked out at each
    scrape from what the subscriptions hold in memory: one pass over them, no read of the
    history (the exact ``pending`` and ``lag_seconds`` of one subscription are its state's)."""

    def __init__(self, census: SubscriptionCensus, kinds: Iterable[str]) -> None:
        self._census = census
        self._kinds = tuple(kinds)

    def collect(self) -> Iterator[Metric]:
        held: Tally[tuple[str, str]] = Tally({(PULL, ACTIVE): 0})
        lag = dict.fromkeys(self._kinds, 0.0)
        for kind in self._kinds:
            held[kind, ACTIVE] = held[kind, DISABLED] = 0
        now = time.time()
        for kind, status, holding_ns in self._census():
            held[kind, status] += 1
            if holding_ns is not None:
                lag[kind] = max(lag.get(kind, 0.0), now - holding_ns / 1e9)
        subscriptions = GaugeMetricFamily(
            "aviso_subscriptions", "Subscriptions held", labels=["kind", "status"]
        )
        for (kind, status), count in sorted(held.items()):
            subscriptions.add_metric([kind, status], count)
        yield subscriptions
        oldest = GaugeMetricFamily(
            "aviso_subscription_max_lag_seconds",
            "Age of the oldest notification a push subscription is delivering or retrying",
            labels=["kind"],
        )
        for kind, seconds in sorted(lag.items()):
            oldest.add_metric([kind], max(0.0, seconds))
        yield oldest


class DeliveryMetrics:
    """Push deliveries, by delivery kind (the registered kinds, a bounded set)."""

    def __init__(self, registry: CollectorRegistry, kinds: Iterable[str]) -> None:
        self.attempts = Counter(
            "aviso_webhook_deliveries",
            "Push delivery attempts by outcome, plus one dead_lettered per notification given up",
            ["kind", "outcome"],
            registry=registry,
        )
        self.latency = Histogram(
            "aviso_webhook_delivery_latency_seconds",
            "From a notification's storage to its delivery's 2xx (retries included)",
            ["kind"],
            buckets=DELIVERY_BUCKETS,
            registry=registry,
        )
        for kind in kinds:  # at 0 from startup, for dashboards' rates
            for outcome in DELIVERY_OUTCOMES:
                self.attempts.labels(kind, outcome)
            self.latency.labels(kind)
