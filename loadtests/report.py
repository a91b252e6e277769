"""Figures from one run's samples, the summary table, ``summary.csv`` and the latency chart."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# The order figures are listed in; anything else (failure-only names) follows.
ORDER = (
    "notify",
    "notify (watched)",
    "watch: delivery",
    "watch: first event",
    "watch: first notification",
    "watch: headers",
    "replay: end_of_stream",
    "replay: events",
    "replay: headers",
)
# The figure a scenario is judged by (zero of it means the run measured nothing).
MAIN = {
    "notify": "notify",
    "watch": "watch: delivery",
    "replay": "replay: end_of_stream",
    "mixed": "watch: delivery",
}
# Figures drawn on the chart: latencies that are the product's, not only header times.
CHARTED = (
    "notify",
    "notify (watched)",
    "watch: delivery",
    "watch: first event",
    "replay: end_of_stream",
)


@dataclass
class Figure:
    run: str
    metric: str
    count: int
    failures: int
    per_s: float | None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def figures(result: Mapping[str, Any], run: str) -> dict[str, Figure]:
    """Per metric: count, failures, rate, latency percentiles (from the exact samples).

    A rate is taken from the metric's first sample to the end of the run (the watch
    scenario's publisher starts only once every watcher is connected).
    """
    elapsed = max(float(result["elapsed"]), 1e-9)
    out: dict[str, Figure] = {}
    for name, entry in result["metrics"].items():
        samples = entry["ms"]
        span = elapsed
        if "first" in entry and "ended" in result:
            span = max(float(result["ended"]) - float(entry["first"]), 1e-9)
        figure = Figure(run, name, entry["count"], entry["failures"], entry["count"] / span)
        if samples:
            figure.p50_ms = percentile(samples, 0.50)
            figure.p95_ms = percentile(samples, 0.95)
            figure.p99_ms = percentile(samples, 0.99)
            figure.max_ms = max(samples)
        out[name] = figure
        if entry.get("events"):
            out["replay: events"] = Figure(
                run, "replay: events", entry["events"], 0, entry["events"] / span
            )
    return out


def ordered(names: Iterable[str]) -> list[str]:
    names = set(names)
    return [n for n in ORDER if n in names] + sorted(names - set(ORDER))


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return value / base


def _cell(value: float | None, width: int = 9, digits: int = 1) -> str:
    if value is None:
        return "-".rjust(width)
    return f"{value:,.{digits}f}".rjust(width)


COLUMNS = ("count", "per s", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors")


def table(aviso: Mapping[str, Figure], baselines: Mapping[str, Mapping[str, Figure]]) -> str:
    """One block per figure: aviso, each baseline measured for it, and aviso / baseline."""
    head = f"{'':44}{'count':>9}{'per s':>10}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
    head += f"{'max ms':>9}{'errors':>8}"
    lines = [head]
    for name in ordered(aviso):
        mine = aviso[name]
        lines.append(name)
        lines.append(_row("aviso", mine))
        for label, figs in baselines.items():
            base = figs.get(name)
            if base is None:
                continue
            lines.append(_row(label, base))
            lines.append(
                f"  {'ratio aviso / ' + label:42}{'':9}"
                + _cell(ratio(mine.per_s, base.per_s), 10, 2)
                + _cell(ratio(mine.p50_ms, base.p50_ms), 9, 2)
                + _cell(ratio(mine.p95_ms, base.p95_ms), 9, 2)
                + _cell(ratio(mine.p99_ms, base.p99_ms), 9, 2)
            )
    return "\n".join(lines)


def _row(label: str, f: Figure) -> str:
    return (
        f"  {label:42}{f.count:>9,}"
        + _cell(f.per_s, 10)
        + _cell(f.p50_ms)
        + _cell(f.p95_ms)
        + _cell(f.p99_ms)
        + _cell(f.max_ms)
        + f"{f.failures:>8,}"
    )


def write_csv(
    path: Path, aviso: Mapping[str, Figure], baselines: Mapping[str, Mapping[str, Figure]]
) -> None:
    fields = [*asdict(Figure("", "", 0, 0, 0.0)), "vs", "ratio_per_s", "ratio_p50"]
    fields += ["ratio_p95", "ratio_p99"]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for name in ordered(aviso):
            writer.writerow(asdict(aviso[name]))
            for figs in baselines.values():
                base = figs.get(name)
                if base is None:
                    continue
                row: dict[str, Any] = asdict(base)
                row["vs"] = "aviso / " + base.run
                for key in ("per_s", "p50_ms", "p95_ms", "p99_ms"):
                    value = ratio(getattr(aviso[name], key), getattr(base, key))
                    row["ratio_" + key.removesuffix("_ms")] = (
                        None if value is None else round(value, 3)
                    )
                writer.writerow(row)


def chart(
    path: Path,
    title: str,
    samples: Mapping[str, Mapping[str, list[float]]],
    figs: Mapping[str, Mapping[str, Figure]],
) -> bool:
    """Latency distribution per charted metric: percentile (in nines) against milliseconds.

    ``samples`` and ``figs`` are keyed by run label ("aviso" first), then metric. Returns
    False (and draws nothing) when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        return False
    metrics = [m for m in CHARTED if samples.get("aviso", {}).get(m)]
    if not metrics:
        return False
    fig, axes = plt.subplots(len(metrics), 1, figsize=(9, 3.2 * len(metrics)), squeeze=False)
    ticks = [0.5, 0.9, 0.95, 0.99, 0.999]
    for axis, metric in zip(axes[:, 0], metrics, strict=True):
        for run, by_metric in samples.items():
            values = by_metric.get(metric)
            if not values:
                continue
            ordered_ms = np.sort(np.asarray(values, dtype=float))
            fraction = (np.arange(len(ordered_ms)) + 0.5) / len(ordered_ms)
            nines = -np.log10(1 - fraction)
            f = figs[run][metric]
            label = f"{run}: p50 {f.p50_ms:.1f} / p95 {f.p95_ms:.1f} / p99 {f.p99_ms:.1f} ms"
            label += f", {f.per_s:,.0f}/s" if f.per_s else ""
            (line,) = axis.plot(nines, ordered_ms, label=label)
            for p, value in ((0.5, f.p50_ms), (0.95, f.p95_ms), (0.99, f.p99_ms)):
                axis.plot([-np.log10(1 - p)], [value], "o", color=line.get_color())
        axis.set_xticks([-np.log10(1 - t) for t in ticks], [f"p{t * 100:g}" for t in ticks])
        axis.set_xlim(0, 3.2)
        axis.set_yscale("log")
        axis.set_ylabel("ms")
        axis.set_title(metric, fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def profile_top(raw_profile: Path, limit: int = 25) -> str:
    """The functions most often on top of the stack in a ``py-spy record -f raw`` file."""
    own: dict[str, int] = {}
    total = 0
    for line in raw_profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        leaf = stack.rsplit(";", 1)[-1]
        own[leaf] = own.get(leaf, 0) + int(count)
    lines = [f"{total} samples; leaf frames by share of samples:"]
    for frame, samples in sorted(own.items(), key=lambda item: -item[1])[:limit]:
        lines.append(f"{100 * samples / max(total, 1):5.1f}%  {frame}")
    return "\n".join(lines)
