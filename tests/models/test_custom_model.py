"""The README's example of a model that is not in transformers (examples/custom_model), checked as its
repository would check it: the example's own conftest registers it, the installed suite runs on it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import REPOSITORY
from tests.conftest import checks_by_id, read_report

EXAMPLE = REPOSITORY / "examples" / "custom_model"


def test_a_model_defined_in_the_users_repository_is_registered_and_checked(pytester: pytest.Pytester,
                                                                           tmp_path: Path) -> None:
    for name in ("my_decoder.py", "conftest.py"):
        shutil.copy(EXAMPLE / name, pytester.path / name)
    result = pytester.runpytest("--fullgraph-models=my_decoder", "--fullgraph-backend=eager", "-k",
                                "greedy-decode", "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=1)
    checks = checks_by_id(read_report(tmp_path))
    assert sorted(checks) == ["my_decoder-greedy-decode"]
    for check in checks.values():
        assert check["outcome"] == "pass", check["message"]
        assert (check["model_class"], check["can_compile_fullgraph"]) == ("MyDecoderForCausalLM", True)
    assert checks["my_decoder-greedy-decode"]["graph_count"] == 1
