import argparse
import json
from pathlib import Path

import pytest

from benchmarks.results import (
    add_round_options,
    parse_rounds,
    ratio_spread,
    rotated,
    spread,
    write_results,
)


def test_a_run_is_written_with_its_rounds_summary_and_machine(tmp_path: Path) -> None:
    rounds = [{"round": 1, "ratio": 0.9}, {"round": 2, "ratio": 1.1}, {"round": 3, "ratio": 1.0}]
    path = write_results("demo", rounds, {"ratio": spread([0.9, 1.1, 1.0])}, tmp_path)
    document = json.loads(path.read_text())
    assert path.name.startswith("demo-") and path.suffix == ".json"
    assert document["rounds"] == rounds
    assert document["summary"]["ratio"] == {"median": 1.0, "min": 0.9, "max": 1.1, "rounds": 3}
    assert document["machine"]["cores"] >= 1
    assert "python" in document["machine"]


def test_each_round_starts_one_name_further_on() -> None:
    names = ("notify", "bare", "raw")
    orders = [rotated(names, number) for number in range(4)]
    assert orders == [
        ["notify", "bare", "raw"],
        ["bare", "raw", "notify"],
        ["raw", "notify", "bare"],
        ["notify", "bare", "raw"],
    ]
    assert [rotated(("a", "b"), number) for number in range(3)] == [
        ["a", "b"],
        ["b", "a"],
        ["a", "b"],
    ]


def test_a_ratio_spread_pairs_the_rounds() -> None:
    assert ratio_spread([2.0, 3.0, 8.0], [1.0, 3.0, 4.0]) == spread([2.0, 1.0, 2.0])
    with pytest.raises(ValueError):
        ratio_spread([1.0, 2.0], [1.0])


def test_fewer_than_three_rounds_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_round_options(parser, 5, "rotated")
    assert parse_rounds(parser, []).rounds == 5
    assert parse_rounds(parser, ["--rounds", "3", "--results-dir", "x"]).results_dir == Path("x")
    with pytest.raises(SystemExit) as refused:
        parse_rounds(parser, ["--rounds", "2"])
    assert refused.value.code == 2 and "at least 3" in capsys.readouterr().err
