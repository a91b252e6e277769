"""``aviso-server load run``: servers up on loopback, baselines, the locust run, summary, teardown.

Every server this starts listens on 127.0.0.1 only, and every phase is bounded: locust runs
in a child process for ``duration`` seconds (killed if it overstays by a margin), with a cap
on the number of requests it records; seeding and raw-NATS baselines are fixed counts.
This module never imports locust (it would monkey-patch the process for gevent).
"""

from __future__ import annotations

import asyncio
import importlib.resources
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from aviso_loadtests import identifiers, report
from aviso_loadtests.pipelined import post_many
from aviso_loadtests.servers import aviso_server, bare_server, nats_server, raw_post

SCENARIOS = ("notify", "watch", "replay", "mixed")
BACKENDS = ("in_memory", "jetstream")
DEFAULT_USERS = {"notify": 32, "watch": 100, "replay": 4, "mixed": 100}
DEFAULT_HISTORY = {"replay": 10_000, "mixed": 1_000}
# replay measures capacity (pacing off); mixed keeps the shipped pacing, as production would:
# with pacing off a replay yields the event loop only when its socket's buffer is full.
DEFAULT_REPLAY_DELAY_MS = {"mixed": 100}
BARE_REPLAY_DELAY_ENV = "AVISO_LOAD_BARE_REPLAY_DELAY_MS"
CHILD_MARGIN = 60.0  # seconds a locust child may take beyond its duration before it is killed
RESULTS_DIR = "aviso-load-results"  # under the current directory unless --output is given


@dataclass
class LoadOptions:
    scenario: str
    backend: str = "in_memory"
    users: int | None = None
    duration: float = 60.0
    rate: float = 0.0
    watch_rate: float = 4.0
    history: int | None = None
    spawn_rate: float | None = None
    baselines: bool = True
    baseline_duration: float | None = None
    replay_delay_ms: int | None = None
    max_requests: int = 2_000_000
    profile: bool = False
    out_dir: Path | None = None
    echo: Callable[[str], None] = print
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved_users(self) -> int:
        return self.users if self.users is not None else DEFAULT_USERS[self.scenario]

    def resolved_replay_delay_ms(self) -> int:
        if self.replay_delay_ms is not None:
            return self.replay_delay_ms
        return DEFAULT_REPLAY_DELAY_MS.get(self.scenario, 0)

    def resolved_history(self) -> int:
        if self.history is not None:
            return self.history
        return DEFAULT_HISTORY.get(self.scenario, 0)


def aviso_config(backend: str, nats_url: str | None, replay_delay_ms: int = 0) -> str:
    """The shipped dissemination and mars schemas, history kept, replay pacing as given."""
    schemas = yaml.safe_load(
        importlib.resources.files("aviso_loadtests").joinpath("schemas.yaml").read_text()
    )
    if backend == "jetstream":
        backend_section: dict[str, Any] = {
            "kind": "jetstream",
            "jetstream": {"nats_url": nats_url, "storage_type": "file"},
        }
        for schema in schemas.values():  # keep every notification, as in-memory does
            schema["storage_policy"] = {"allow_duplicates": True}
    else:
        backend_section = {
            "kind": "in_memory",
            "in_memory": {"max_history_per_topic": 1_000_000, "max_topics": 100_000},
        }
    document = {
        "application": {"host": "127.0.0.1", "port": 0, "base_url": "http://127.0.0.1"},
        "logging": {"level": "warn"},
        "notification_backend": backend_section,
        "auth": {"enabled": False},
        "watch_endpoint": {
            "sse_heartbeat_interval_sec": 10,
            "connection_max_duration_sec": 3600,
            "replay_batch_size": 100,
            "replay_batch_delay_ms": replay_delay_ms,
            "max_historical_notifications": 1_000_000,
        },
        "notification_schema": schemas,
    }
    return yaml.safe_dump(document, sort_keys=False)


def seed_history(port: int, count: int) -> None:
    """``count`` mars class-rd notifications, the history every replay reads."""
    if count <= 0:
        return
    date = identifiers.today()

    def request(n: int) -> bytes:
        return raw_post("/api/v1/notification", identifiers.history(n, date).decode())

    statuses = asyncio.run(post_many(port, count, request, connections=8))
    if statuses != {200: count}:
        raise RuntimeError(f"seeding the replay history failed: {statuses}")


@contextmanager
def cpu_meter(pid: int | None) -> Iterator[dict[str, float]]:
    """CPU seconds ``pid`` used inside the block, as a share of one core."""
    result: dict[str, float] = {}
    process = psutil.Process(pid) if pid else None
    before = sum(process.cpu_times()[:2]) if process else 0.0
    start = time.monotonic()
    try:
        yield result
    finally:
        if process is not None and process.is_running():
            used = sum(process.cpu_times()[:2]) - before
            result["cpu_share"] = used / max(time.monotonic() - start, 1e-9)


def child_pid(module: str) -> int | None:
    for child in psutil.Process().children(recursive=True):
        try:
            if module in " ".join(child.cmdline()):
                pid: int = child.pid
                return pid
        except psutil.Error:
            continue
    return None


class LoadRun:
    def __init__(self, options: LoadOptions) -> None:
        self.options = options
        scenario = options.scenario
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
        if options.backend not in BACKENDS:
            raise ValueError(f"unknown backend {options.backend!r}; one of {', '.join(BACKENDS)}")
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self.out = options.out_dir or Path.cwd() / RESULTS_DIR / (
            f"{stamp}-{scenario}-{options.backend}"
        )
        self.out.mkdir(parents=True, exist_ok=True)
        self.results: dict[str, dict[str, Any]] = {}
        self.raw: dict[str, report.Figure] = {}
        self.raw_samples: dict[str, list[float]] = {}
        self.cpu: dict[str, dict[str, float]] = {}
        self.nats_pid: int | None = None

    # -- phases ------------------------------------------------------------------------

    def locust(self, label: str, host: str, duration: float, server_pid: int | None) -> None:
        o = self.options
        spec = {
            "label": label,
            "scenario": o.scenario,
            "host": host,
            "users": o.resolved_users(),
            "duration": duration,
            "rate": o.rate,
            "watch_rate": o.watch_rate,
            "history": o.resolved_history(),
            "spawn_rate": o.spawn_rate,
            "max_requests": o.max_requests,
            "out_dir": str(self.out),
        }
        spec_path = self.out / f"{label}_spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        o.echo(f"[{label}] locust: {o.scenario}, {spec['users']} users, {duration:g} s, {host}")
        load_before = os.getloadavg()[0]
        with (self.out / f"{label}_locust.log").open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "aviso_loadtests.child", str(spec_path)],
                stdout=log,
                stderr=log,
            )
            profilers = self.start_profilers(label, {"server": server_pid, "locust": process.pid})
            children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            try:
                with cpu_meter(server_pid) as server_cpu, cpu_meter(self.nats_pid) as nats_cpu:
                    code = process.wait(duration + CHILD_MARGIN)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
                raise RuntimeError(f"locust child overran its {duration:g} s run") from None
            finally:
                children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
                for profiler in profilers:
                    try:
                        profiler.wait(duration + 30)
                    except subprocess.TimeoutExpired:
                        profiler.kill()
                        profiler.wait(10)
        locust_seconds = sum(
            getattr(children_after, f) - getattr(children_before, f)
            for f in ("ru_utime", "ru_stime")
        )
        if code != 0:
            tail = (self.out / f"{label}_locust.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"locust child exited with {code}:\n{tail}")
        self.results[label] = json.loads((self.out / f"{label}_samples.json").read_text())
        self.cpu[label] = {"server": server_cpu.get("cpu_share", 0.0)}
        self.cpu[label]["loadavg"] = max(load_before, os.getloadavg()[0])
        if self.nats_pid:
            self.cpu[label]["nats-server"] = nats_cpu.get("cpu_share", 0.0)
        self.cpu[label]["locust"] = locust_seconds / max(time.monotonic() - started, 1e-9)

    def start_profilers(
        self, label: str, pids: dict[str, int | None]
    ) -> list[subprocess.Popen[bytes]]:
        if not self.options.profile:
            return []
        started = []
        for role, pid in pids.items():
            if pid is None:
                continue
            output = self.out / f"{label}-{role}.pyspy.txt"
            command = ["py-spy", "record", "-p", str(pid), "-f", "raw", "-o", str(output)]
            command += ["-d", str(int(self.options.duration)), "-r", "50", "--nonblocking"]
            started.append(
                subprocess.Popen(
                    command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ
                )
            )
        return started

    def baseline(self) -> None:
        o = self.options
        bare = "bare_app" if o.scenario == "notify" else "bare_streams"
        module = f"aviso_loadtests.{bare}"
        env = {**os.environ, BARE_REPLAY_DELAY_ENV: str(o.resolved_replay_delay_ms())}
        with bare_server(module, env) as port:
            seed_history(port, o.resolved_history())
            duration = o.baseline_duration or o.duration
            self.locust("bare", f"http://127.0.0.1:{port}", duration, child_pid(module))

    def raw_nats(self, url: str, phase: str) -> None:
        """The raw nats-py figure for this scenario (before or after the aviso run)."""
        from aviso_loadtests import baselines

        o = self.options
        label = "raw nats-py"
        # Capacity figures, compared only with aviso figures that are capacities too: notify
        # as fast as the users can, replay with pacing off.
        if phase == "before" and o.scenario in ("notify", "mixed") and not o.rate:
            count = 20_000
            users = o.resolved_users()
            # As many publishers as the run's notify users (3 in 10 of the mixed profile).
            concurrency = users if o.scenario == "notify" else max(1, round(users * 0.3))
            concurrency = min(concurrency, 64)
            o.echo(f"[{label}] publish+ack, {count} messages, {concurrency} concurrent")
            rate = asyncio.run(baselines.raw_publish_rate(url, count, concurrency))
            self.raw["notify"] = report.Figure(label + " publish+ack", "notify", count, 0, rate)
        if phase == "before" and o.scenario in ("watch", "mixed"):
            count = 200
            o.echo(f"[{label}] publish -> ordered consumer, {count} messages")
            latencies = asyncio.run(baselines.raw_delivery_latencies(url, count, 0.01))
            figure = report.figures(
                {"elapsed": 1, "metrics": {"watch: delivery": _entry(latencies)}},
                label + " consume",
            )["watch: delivery"]
            figure.per_s = None  # paced by this probe, not a capacity
            self.raw["watch: delivery"] = figure
            self.raw_samples["watch: delivery"] = latencies
        history = o.resolved_history() if o.resolved_replay_delay_ms() == 0 else 0
        if phase == "after" and o.scenario in ("replay", "mixed") and history:
            o.echo(f"[{label}] ordered consumer read of the {history} replayed messages")
            rate = asyncio.run(baselines.raw_ordered_read_rate(url, "mars.rd.>", history))
            self.raw["replay: events"] = report.Figure(
                label + " ordered read", "replay: events", history, 0, rate
            )

    def aviso(self, nats_url: str | None) -> None:
        o = self.options
        config = self.out / "aviso.yaml"
        config.write_text(aviso_config(o.backend, nats_url, o.resolved_replay_delay_ms()))
        with aviso_server(config, self.out / "aviso.log") as (url, process):
            seed_history(int(url.rsplit(":", 1)[1]), o.resolved_history())
            o.echo(f"[aviso] server pid {process.pid}, {o.backend} backend, {url}")
            self.locust("aviso", url, o.duration, process.pid)

    def execute(self) -> int:
        o = self.options
        with ExitStack() as stack:
            nats_url = None
            if o.backend == "jetstream":
                nats = stack.enter_context(nats_server(self.out / "nats"))
                nats_url, self.nats_pid = nats.url, nats.process.pid
            if o.baselines:
                self.baseline()
                if nats_url:
                    self.raw_nats(nats_url, "before")
            self.aviso(nats_url)
            if o.baselines and nats_url:
                self.raw_nats(nats_url, "after")
        return self.summarise()

    # -- output ------------------------------------------------------------------------

    def summarise(self) -> int:
        o = self.options
        aviso = report.figures(self.results["aviso"], "aviso")
        baselines: dict[str, dict[str, report.Figure]] = {}
        if "bare" in self.results:
            baselines["bare Starlette"] = report.figures(self.results["bare"], "bare Starlette")
        for metric, figure in self.raw.items():
            baselines.setdefault(figure.run, {})[metric] = figure
        result = self.results["aviso"]
        cpu = self.cpu.get("aviso", {})
        title = (
            f"aviso-server load run {o.scenario} --backend {o.backend} "
            f"--users {o.resolved_users()} --duration {o.duration:g}"
        )
        header = [
            title,
            f"  {result['peak_users']} users at peak; {result['elapsed']:.1f} s measured;"
            f" CPU (share of one core): server {cpu.get('server', 0):.0%},"
            f" locust {cpu.get('locust', 0):.0%}"
            + (f", nats-server {cpu['nats-server']:.0%}" if "nats-server" in cpu else "")
            + f"; {os.cpu_count()} cores shared by all;"
            f" 1-min load average up to {cpu.get('loadavg', 0):.1f}",
        ]
        if "bare" in self.cpu:
            bare_cpu = self.cpu["bare"]
            header.append(
                f"  baseline run: bare Starlette CPU {bare_cpu.get('server', 0):.0%},"
                f" locust {bare_cpu.get('locust', 0):.0%},"
                f" load average up to {bare_cpu.get('loadavg', 0):.1f}"
            )
        if o.resolved_history() and o.scenario in ("replay", "mixed"):
            header.append(
                f"  replay history: {o.resolved_history()} notifications; pacing"
                f" {o.resolved_replay_delay_ms()} ms between batches of 100"
            )
        text = "\n".join([*header, "", report.table(aviso, baselines)])
        errors = sum(f.failures for f in aviso.values())
        if result["errors"]:
            text += "\nerrors:\n" + "\n".join(
                f"  {count:>7}  {message}" for message, count in result["errors"].items()
            )
        o.echo(text)
        (self.out / "summary.txt").write_text(text + "\n")
        report.write_csv(self.out / "summary.csv", aviso, baselines)
        samples = {"aviso": {n: m["ms"] for n, m in result["metrics"].items()}}
        figs = {"aviso": aviso}
        if "bare" in self.results:
            samples["bare Starlette"] = {
                n: m["ms"] for n, m in self.results["bare"]["metrics"].items()
            }
            figs["bare Starlette"] = baselines["bare Starlette"]
        for metric, values in self.raw_samples.items():
            run = self.raw[metric].run
            samples.setdefault(run, {})[metric] = values
            figs.setdefault(run, {})[metric] = self.raw[metric]
        charted = report.chart(self.out / "latency.png", title, samples, figs)
        if o.profile:
            for path in sorted(self.out.glob("aviso-*.pyspy.txt")):
                top = report.profile_top(path)
                path.with_suffix(".top.txt").write_text(top + "\n")
        main = aviso.get(report.MAIN[o.scenario])
        throughput = main.count if main else 0
        summary = {
            "scenario": o.scenario,
            "backend": o.backend,
            "users": o.resolved_users(),
            "duration": o.duration,
            "errors": errors,
            "main_metric": report.MAIN[o.scenario],
            "main_count": throughput,
            "cpu": self.cpu,
            "figures": {
                run: {name: vars(f) for name, f in figs_.items()}
                for run, figs_ in {"aviso": aviso, **baselines}.items()
            },
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        files = "summary.txt, summary.csv, summary.json, *_stats.csv"
        files += ", latency.png" if charted else " (no chart: pip install matplotlib)"
        o.echo(f"\nwritten to {self.out}: {files}")
        if errors or not throughput:
            o.echo(f"FAILED: {errors} errors, {throughput} x {report.MAIN[o.scenario]}")
            return 1
        return 0


def _entry(latencies: list[float]) -> dict[str, Any]:
    return {"count": len(latencies), "failures": 0, "ms": latencies}


def run_load(options: LoadOptions) -> int:
    return LoadRun(options).execute()
