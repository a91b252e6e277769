"""``aviso-server load run SCENARIO``: the click command (reached lazily from
``aviso-server load``)."""

from __future__ import annotations

from pathlib import Path

import click

from aviso_loadtests.run import BACKENDS, DEFAULT_USERS, SCENARIOS, LoadOptions, run_load


@click.command("run")
@click.argument("scenario", type=click.Choice(SCENARIOS))
@click.option("--backend", type=click.Choice(BACKENDS), default="in_memory", show_default=True)
@click.option(
    "--users",
    type=click.IntRange(1, 5000),
    help="Concurrent locust users (default: "
    + ", ".join(f"{k} {v}" for k, v in DEFAULT_USERS.items())
    + "). watch and mixed add one publisher.",
)
@click.option(
    "--duration",
    type=click.FloatRange(1, 3600),
    default=60.0,
    show_default=True,
    help="Seconds of load (ramp-up included), for aviso and again for the baseline.",
)
@click.option(
    "--rate",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="notify/mixed: notifications per second over all notify users (0: as fast as they can).",
)
@click.option(
    "--watch-rate",
    type=click.FloatRange(0.01, 1000),
    default=4.0,
    show_default=True,
    help="watch/mixed: notifications per second that every watcher receives.",
)
@click.option(
    "--history",
    type=click.IntRange(0, 1_000_000),
    help="replay/mixed: notifications seeded and replayed per request (default 10000; 1000).",
)
@click.option(
    "--replay-delay-ms",
    type=click.IntRange(0, 10_000),
    help="replay_batch_delay_ms for aviso and the bare app (default: replay 0, mixed 100).",
)
@click.option("--spawn-rate", type=click.FloatRange(0.1, 1000), help="Users started per second.")
@click.option(
    "--baselines/--no-baselines",
    default=True,
    show_default=True,
    help="Measure the bare Starlette app (and raw nats-py on jetstream) in the same run.",
)
@click.option("--baseline-duration", type=click.FloatRange(1, 3600), help="Default: --duration.")
@click.option(
    "--max-requests",
    type=click.IntRange(1),
    default=2_000_000,
    show_default=True,
    help="Stop a locust run early once it recorded this many requests/events.",
)
@click.option("--profile", is_flag=True, help="py-spy record the server and locust (raw stacks).")
@click.option(
    "--output",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory (default: ./aviso-load-results/<time>-<scenario>-<backend>).",
)
def run(
    scenario: str,
    backend: str,
    users: int | None,
    duration: float,
    rate: float,
    watch_rate: float,
    history: int | None,
    replay_delay_ms: int | None,
    spawn_rate: float | None,
    baselines: bool,
    baseline_duration: float | None,
    max_requests: int,
    profile: bool,
    out_dir: Path | None,
) -> None:
    """Load-test SCENARIO (notify, watch, replay, mixed) on loopback with locust.

    Starts aviso (and nats-server for --backend jetstream) on 127.0.0.1, runs locust
    headless for --duration seconds, stops everything, prints a summary with each figure
    beside its baseline, and writes CSV files and a latency chart. Exits 1 if the aviso run
    had errors or measured nothing.
    """
    options = LoadOptions(
        scenario=scenario,
        backend=backend,
        users=users,
        duration=duration,
        rate=rate,
        watch_rate=watch_rate,
        history=history,
        replay_delay_ms=replay_delay_ms,
        spawn_rate=spawn_rate,
        baselines=baselines,
        baseline_duration=baseline_duration,
        max_requests=max_requests,
        profile=profile,
        out_dir=out_dir,
        echo=click.echo,
    )
    try:
        code = run_load(options)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    raise SystemExit(code)
