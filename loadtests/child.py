"""One bounded headless locust run, as a child process of ``aviso-server load run``.

  python -m aviso_loadtests.child SPEC.json

Locust runs as a library (``Environment`` + a local runner). The run stops after
``duration`` seconds, or earlier once ``max_requests`` request events were recorded. Writes
``<label>_stats.csv``, ``<label>_failures.csv`` and ``<label>_exceptions.csv`` (locust's own
statistics) and ``<label>_samples.json`` (every response time exactly, for the summary).

Spec keys: label, scenario, host, users, duration, out_dir; optional rate, watch_rate,
history, spawn_rate, max_requests, and publish_delay (seconds before the watched publisher's
first notification; by default, in the watch scenario, the time to start every watcher).
"""

from gevent import monkey

monkey.patch_all()

import csv  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from locust import User  # noqa: E402
from locust.env import Environment  # noqa: E402
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV  # noqa: E402

from aviso_loadtests import scenarios  # noqa: E402


class Collector:
    """Every request event's response time, per (type, name), up to ``cap`` in total."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.metrics: dict[str, dict[str, Any]] = {}
        self.errors: dict[str, int] = {}

    def on_request(
        self,
        request_type: str,
        name: str,
        response_time: float,
        response_length: int,
        exception: BaseException | None = None,
        context: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        self.total += 1
        entry = self.metrics.get(name)
        if entry is None:
            entry = self.metrics[name] = {
                "type": request_type,
                "first": time.time(),
                "count": 0,
                "failures": 0,
                "bytes": 0,
                "events": 0,
                "ms": [],
            }
        if exception is not None:
            entry["failures"] += 1
            key = f"{name}: {type(exception).__name__}: {exception}"[:300]
            self.errors[key] = self.errors.get(key, 0) + 1
            return
        entry["count"] += 1
        entry["bytes"] += response_length or 0
        entry["events"] += int((context or {}).get("events", 0))
        entry["ms"].append(round(response_time, 3))

    @property
    def full(self) -> bool:
        return self.total >= self.cap


def write_locust_csv(environment: Environment, base: Path) -> None:
    writer = StatsCSV(environment, PERCENTILES_TO_REPORT)
    for suffix, method in (
        ("stats", writer.requests_csv),
        ("failures", writer.failures_csv),
        ("exceptions", writer.exceptions_csv),
    ):
        with open(f"{base}_{suffix}.csv", "w", newline="") as handle:
            method(csv.writer(handle))


def run(spec: dict[str, Any]) -> dict[str, Any]:
    classes, users = scenarios.configure(spec)
    user_classes: list[type[User]] = list(classes)
    environment = Environment(user_classes=user_classes, host=spec["host"])
    collector = Collector(int(spec.get("max_requests", 2_000_000)))
    environment.events.request.add_listener(collector.on_request)
    runner = environment.create_local_runner()
    spawn_rate = scenarios.spawn_rate(spec, users)
    started = time.time()
    runner.start(users, spawn_rate=spawn_rate)
    deadline = time.monotonic() + float(spec["duration"])
    peak_users = 0
    while time.monotonic() < deadline and not collector.full:
        gevent.sleep(0.1)
        peak_users = max(peak_users, runner.user_count)
    elapsed = time.time() - started
    runner.stop()
    runner.quit()
    base = Path(spec["out_dir"]) / spec["label"]
    write_locust_csv(environment, base)
    result = {
        "label": spec["label"],
        "scenario": spec["scenario"],
        "host": spec["host"],
        "users": users,
        "peak_users": peak_users,
        "started": started,
        "elapsed": elapsed,
        "ended": started + elapsed,
        "stopped_by_cap": collector.full,
        "metrics": collector.metrics,
        "errors": collector.errors,
    }
    Path(f"{base}_samples.json").write_text(json.dumps(result))
    return result


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result = run(spec)
    counts = {name: m["count"] for name, m in result["metrics"].items()}
    print(json.dumps({"label": result["label"], "counts": counts}), flush=True)


if __name__ == "__main__":
    main()
