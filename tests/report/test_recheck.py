"""``report recheck``: recorded checks rerun with the current code, each difference from the record listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from pytest_fullgraph import report
from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report.recheck import Drawn, draw, pytest_arguments
from tests.factories import a_break, a_check, cli

ENVIRONMENT = {"torch": torch.__version__, "transformers": transformers.__version__, "backend": "eager",
               "max_new_tokens": 2, "breaks": "all", "device": "cpu", "run_slow": False}


def saved(tmp_path: Path, checks: list[CheckResult], **environment: object) -> Path:
    report.write(report.Report({**ENVIRONMENT, **environment}, checks), tmp_path)
    return tmp_path / report.JSON_NAME


@pytest.mark.breadth
def test_a_check_as_recorded_is_the_same_and_one_recorded_otherwise_differs(tmp_path: Path) -> None:
    """llama's greedy decode passes; a record saying it breaks is listed as differing, and the command exits 1."""
    path = saved(tmp_path, [a_check("llama", "pass", scenario="greedy"),
                            a_check("llama", "break", scenario="sample", first_break=a_break())])
    completed = cli("report", "recheck", str(path), "--sample", "2", "--json", str(tmp_path / "recheck.json"))
    assert completed.returncode == 1, completed.stdout + completed.stderr
    lines = completed.stdout.splitlines()
    assert f"SAME {path} llama-greedy-decode-float32: pass" in " ".join(lines)
    assert (f"DIFFERS {path} llama-sample-decode-float32: recorded break at "
            "transformers/models/llama/modeling_llama.py:7 (Data-dependent branching), now pass: ") in " ".join(lines)
    assert lines[-1] == "2 recorded check(s) rechecked (seed 0): 1 differ"
    written = json.loads((tmp_path / "recheck.json").read_text())
    assert [each["differs"] == "" for each in written["rechecked"]].count(True) == 1


def test_the_draw_is_seeded_and_the_rerun_uses_the_recorded_settings(tmp_path: Path) -> None:
    path = saved(tmp_path, [a_check("llama", "pass", scenario=scenario)
                            for scenario in ("greedy", "sample", "eos", "padded")],
                 run_slow=True, attn_implementation="eager")
    first, again = draw([str(path)], 2, seed=5), draw([str(path)], 2, seed=5)
    assert [d.result.key for d in first] == [d.result.key for d in again]
    drawn = Drawn(str(path), report.load(path).environment, a_check("llama", "pass", scenario="eos"))
    arguments = pytest_arguments(drawn, Path("r"))
    assert {"--fullgraph-models=llama", "--fullgraph-scenarios=eos", "--fullgraph-levels=decode",
            "--fullgraph-backend=eager", "--fullgraph-max-new-tokens=2", "--fullgraph-breaks=all",
            "--fullgraph-attn=eager", "--run-slow", "--fullgraph-report=r"} <= set(arguments)


def test_checks_of_one_report_rerun_in_one_process_selected_by_id(tmp_path: Path) -> None:
    """bench/draws.py draws a shard's failures in one pytest process: each picked by its id, a dead worker restarted."""
    path = saved(tmp_path, [a_check("llama", "error", scenario="greedy"), a_check("llama", "error", scenario="eos")])
    loaded = report.load(path)
    batch = [Drawn(str(path), loaded.environment, result) for result in loaded.sorted_checks()]
    arguments = pytest_arguments(batch, Path("r"))
    assert {"--fullgraph-models=llama", "--fullgraph-scenarios=eos,greedy", "--max-worker-restart=2"} <= set(arguments)
    assert arguments[arguments.index("-k") + 1] == " or ".join(result.check_id for result in loaded.sorted_checks())
    other = report.load(path)
    with pytest.raises(ValueError, match="one report"):
        pytest_arguments([batch[0], Drawn(str(path), other.environment, other.checks[0])], Path("r"))


def test_a_report_of_other_releases_is_refused_in_one_line(tmp_path: Path) -> None:
    """Rechecking a record of torch 2.11 with torch 2.13 installed would measure 2.13, not the record."""
    path = saved(tmp_path, [a_check("llama", "pass", scenario="greedy")], torch="2.11.0")
    completed = cli("report", "recheck", str(path), "--sample", "1")
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.strip() == (f"pytest_fullgraph: error: {path}: recorded with other releases than "
                                        f"installed (torch release: '2.11.0' recorded, '{torch.__version__}' "
                                        "installed): recheck it in an environment of the recorded releases")


@pytest.mark.parametrize(("arguments", "error"), [
    (["--sample", "3"], "{path}: --sample 3: the reports hold 1 checks"),
    (["--sample", "0"], None),
])
def test_bad_input_is_one_line(tmp_path: Path, arguments: list[str], error: str | None) -> None:
    path = saved(tmp_path, [a_check("llama", "pass", scenario="greedy")])
    completed = cli("report", "recheck", str(path), *arguments)
    assert completed.returncode == 2
    if error is None:
        assert completed.stderr.strip().endswith("argument --sample: '0' is not a positive integer")
    else:
        assert completed.stderr.strip() == "pytest_fullgraph: error: " + error.format(path=path).split(": ", 1)[1]
