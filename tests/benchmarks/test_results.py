import json
from pathlib import Path

from benchmarks.results import spread, write_results


def test_a_run_is_written_with_its_rounds_summary_and_machine(tmp_path: Path) -> None:
    rounds = [{"round": 1, "ratio": 0.9}, {"round": 2, "ratio": 1.1}, {"round": 3, "ratio": 1.0}]
    path = write_results("demo", rounds, {"ratio": spread([0.9, 1.1, 1.0])}, tmp_path)
    document = json.loads(path.read_text())
    assert path.name.startswith("demo-") and path.suffix == ".json"
    assert document["rounds"] == rounds
    assert document["summary"]["ratio"] == {"median": 1.0, "min": 0.9, "max": 1.1, "rounds": 3}
    assert document["machine"]["cores"] >= 1
    assert "python" in document["machine"]
