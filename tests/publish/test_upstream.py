"""`report upstream`: findings drafted per group of whose fault they are, with the reproducers that cover them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.publish.upstream import Finding, findings, upstream_group, write_drafts
from tests import REPOSITORY
from tests.factories import a_break, a_check

BENCH = sorted((REPOSITORY / "bench" / "reports").glob("matrix-*.json.gz"))


#: A check of opt's that broke: which break it is decides whose finding it is.
BROKEN = a_check("opt", "break")


@pytest.mark.parametrize(("finding", "group"), [
    (Finding(BROKEN, a_break(origin="model")), "transformers-models"),
    (Finding(BROKEN, a_break(origin="masking")), "transformers-generation"),
    (Finding(BROKEN, a_break(origin="integration", gb_id="GB4347")), "dynamo"),  # supportable: dynamo's
    (Finding(BROKEN, a_break(origin="loop")), "loop"),
    (Finding(a_check("opt", "error", "compiled generation failed at torch/_inductor/lowering.py:9: KeyError: k")),
     "inductor"),
    (Finding(a_check("opt", "error", "compiled generation failed at torch/_dynamo/x.py:9: KeyError: k")), "dynamo"),
    (Finding(a_check("opt", "error", "compiled generation failed at torch/export/x.py:9: KeyError: k", level="export")),
     "export"),
    (Finding(a_check("opt", "error", "nothing was compiled: transformers ran level 'forward' eagerly")),
     "transformers-generation"),
])
def test_each_finding_goes_to_whoever_can_fix_it(finding: Finding, group: str) -> None:
    assert upstream_group(finding, frozenset({"GB4347"})) == group


def test_a_check_with_several_root_breaks_is_a_finding_per_site() -> None:
    check = a_check("opt", "break", breaks=[a_break(line=7, origin="model"),
                                            a_break(line=8, origin="model", root_cause=False),
                                            a_break(line=9, origin="eos"), a_break(line=9, origin="eos")])
    assert [finding.record.line for finding in findings([check]) if finding.record] == [7, 9]
    assert findings([a_check("opt", "pass"), a_check("opt", "skip")]) == []


def test_nothing_failing_is_nothing_to_draft(tmp_path: Path) -> None:
    written = write_drafts(report.Report({}, [a_check("opt", "pass")]), "r.json", tmp_path)
    assert written == [tmp_path / "README.md"]
    assert "No failing check: nothing to draft." in written[0].read_text()


def test_a_failure_of_our_loop_is_listed_for_this_repository_not_drafted(tmp_path: Path) -> None:
    loop_error = a_check("opt", "error", "eager generation by fullgraph_generate failed at transformers/models/x/"
                         "modeling_x.py:9: ValueError: v; model.generate with a static cache works, so the loop is "
                         "at fault")
    written = write_drafts(report.Report({}, [loop_error]), "r.json", tmp_path)
    index = (tmp_path / "README.md").read_text()
    assert "- not drafted, pytest_fullgraph's own loop: an issue in this repository: 1 finding (opt)" in index
    assert written == [tmp_path / "README.md"]


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed 196-model reports drafted through the command line, with a reproducer for cpmant's check."""
    if not BENCH:
        pytest.skip("bench/reports/matrix-*.json.gz are not in this checkout")
    repros = tmp_path_factory.mktemp("repros")
    (repros / "cpmant.py").write_text("print('BUG: IndexError at transformers/cache_utils.py:487')\n")
    (repros / "repro-index.json").write_text(json.dumps({"reproducers": [
        {"checks": ["cpmant-greedy-forward-float32"], "written": "cpmant.py"}]}))
    output = tmp_path_factory.mktemp("drafts")
    completed = subprocess.run([sys.executable, "-m", "pytest_fullgraph", "report", "upstream", *map(str, BENCH),
                                "--repros", str(repros), "-o", str(output)], capture_output=True, text=True,
                               check=False)
    assert completed.returncode == 0, completed.stderr
    return output


def test_the_196_model_run_is_drafted_per_fault_with_its_reproducers(drafts: Path) -> None:
    index = (drafts / "README.md").read_text()
    assert "[transformers: a model's code (src/transformers/models)](transformers-models.md)" in index
    # minimax's and xlstm's custom caches were our loop's findings until the loop refused them by name
    assert "not drafted, your own code (a conftest model or level): 8 findings (inkling2_loop_text)" in index
    assert "pytest_fullgraph's own loop" not in index and "minimax" not in index
    models = (drafts / "transformers-models.md").read_text()
    section = models[models.index("error: IndexError at transformers/cache_utils.py:487"):]
    section = section[:section.index("\n## ")]
    assert "cpmant, dory" in section and "**Expected:**" in section and "**Actual**" in section
    assert "print('BUG: IndexError at transformers/cache_utils.py:487')" in section  # the reproducer, inlined
    assert "torch 2.13.0+cpu · transformers 5.24.0" in models
    # PyTorch calls GB4347 supportable: dynamo's to support, though transformers' code meets it
    assert "Missing tp_iternext at transformers/utils/output_capturing.py:332" in (drafts / "dynamo.md").read_text()
    generation = (drafts / "transformers-generation.md").read_text()
    assert "at transformers/generation/utils.py:2413 (_prepare_special_tokens)" in generation
    assert "python -m pytest_fullgraph repro" in generation  # no script given for it: how to make one


def test_an_unreadable_report_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    completed = subprocess.run([sys.executable, "-m", "pytest_fullgraph", "report", "upstream", str(bad), "-o",
                                str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert completed.returncode == 2 and completed.stderr.startswith(f"pytest_fullgraph: error: {bad}")
    assert len(completed.stderr.strip().splitlines()) == 1
