"""Recorded failing checks the reproducer tests start from: cpmant's static-cache error by default, and the
break records that other failures carry."""

from __future__ import annotations

from pytest_fullgraph.core.results import BreakRecord, CheckResult
from tests.factories import a_break, a_check

CACHE_ERROR = ("eager generation failed at transformers/cache_utils.py:487: IndexError: index_copy_(): index 11 is "
               "out of bounds for dimension 2 with size 11; model.generate with the default cache works: the model's "
               "static-cache path fails (a bug of the model or transformers, not of the compiler)")
LOOP_CACHE_ERROR = ("eager generation by fullgraph_generate failed at transformers/cache_utils.py:487: IndexError: "
                    "index_copy_(): index 11 is out of bounds for dimension 2 with size 11; model.generate with a "
                    "static cache fails too (IndexError: index_copy_(): index 11 is out of bounds for dimension 2 with "
                    "size 11): the model's static-cache path, not the loop")


def check(model: str = "cpmant", scenario: str = "greedy", level: str = "forward", outcome: str = "error",
          message: str = CACHE_ERROR, stage: str = "eager generation",
          record: BreakRecord | None = None) -> CheckResult:
    """A recorded check (``a_check``) with the failure's defaults: cpmant's forward erring eagerly at its cache."""
    return a_check(model, outcome, message, scenario=scenario, level=level, backend="aot_eager", stage=stage,
                   first_break=record)


def record(gb_type: str = "UserError", file: str = "transformers/models/qwen4_exp/modeling_qwen4_exp.py",
           line: int = 752, origin: str = "model", cause: BreakRecord | None = None) -> BreakRecord:
    """A recorded break (``a_break``) as a failing check carries it: by default a ``UserError`` in a model."""
    return a_break(file, line, origin, exception="torch._dynamo.exc.UserError", gb_type=gb_type, gb_id=None,
                   message="Could not guard", source="", cause=cause)
