"""A scripted model and fake levels for ``run_check``'s decision tree: no model, no compile, milliseconds each.

The scripted model is an oracle: its ``generate`` returns scripted tokens (and logits), so every branch of
``run_check`` is reached on purpose and its outcome and message are known in advance.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from pytest_fullgraph import run_check
from pytest_fullgraph.core.compile_events import CountingBackend
from pytest_fullgraph.core.results import BreakRecord, CheckResult
from pytest_fullgraph.levels.base import ONE_GRAPH, GraphRule, Level

PROMPT_WIDTH = 8  # the greedy scenario: two prompts of 8 tokens
NEW_TOKENS = 4


def tokens(*new_rows: list[int]) -> torch.Tensor:
    """Two rows: a fixed prompt, then the given new tokens."""
    prompt = torch.arange(3, 3 + PROMPT_WIDTH)
    return torch.stack([torch.cat([prompt, torch.tensor(row)]) for row in new_rows])


EAGER = tokens([10, 11, 12, 13], [20, 21, 22, 23])
DIFFERENT = tokens([10, 11, 99, 13], [20, 21, 22, 23])  # row 0, new token 2


class ScriptedModel:
    """Duck-types what a check uses of a causal LM; ``generate`` answers from a script."""

    def __init__(self, reference: torch.Tensor = EAGER, *, second: torch.Tensor | None = None,
                 static: torch.Tensor | Exception | None = None, crash: Exception | None = None) -> None:
        self.config = SimpleNamespace(model_type="scripted",
                                      get_text_config=lambda: SimpleNamespace(vocab_size=128))
        self.generation_config = SimpleNamespace(eos_token_id=None, pad_token_id=0)
        self.reference, self.second, self.static, self.crash = reference, second, static, crash
        self.calls = 0

    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generation_config: Any) -> Any:
        """Scripted tokens; with ``output_logits``, logits whose step 2 puts 12 just ahead of 99."""
        if self.crash is not None:
            raise self.crash
        if getattr(generation_config, "output_logits", False):
            # step 2 (the scripted mismatch): top-1 beats top-2 by 0.25
            logits = [torch.zeros(2, 128) for _ in range(NEW_TOKENS)]
            logits[2][0, 12], logits[2][0, 99] = 1.0, 0.75
            return SimpleNamespace(sequences=self.reference, logits=logits)
        if getattr(generation_config, "cache_implementation", None) == "static" and self.static is not None:
            if isinstance(self.static, Exception):
                raise self.static
            return self.static
        self.calls += 1
        return self.second if self.calls == 2 and self.second is not None else self.reference


class FakeLevel(Level):
    """A level whose runs are scripted: the compiled tokens, the graphs it makes, what it raises."""

    name = "fake"
    description = "a scripted level"

    def __init__(self, *, rule: GraphRule = ONE_GRAPH, compiled: torch.Tensor = EAGER, graphs: int = 1,
                 raises: Exception | None = None, own_loop: torch.Tensor | None = None,
                 diagnosed: list[BreakRecord] | None = None) -> None:
        self.graph_rule, self.compiled, self.graphs, self.raises = rule, compiled, graphs, raises
        self.own_loop = "scripted_loop" if own_loop is not None else ""
        self.own_loop_tokens, self.diagnosed = own_loop, diagnosed or []
        self.compiled_runs = 0

    def run_own_loop_eagerly(self, model: Any, inputs: dict[str, Any], config: Any) -> torch.Tensor | None:
        return self.own_loop_tokens

    def run_compiled(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> torch.Tensor:
        self.compiled_runs += 1
        backend.trace.graph_ops.extend([7] * self.graphs)
        if self.raises is not None:
            raise self.raises
        return self.compiled

    def diagnose(self, model: Any, inputs: dict[str, Any], config: Any, backend: CountingBackend) -> None:
        backend.trace.breaks.extend(self.diagnosed)
        backend.trace.graph_ops.extend([3, 4])


#: Where the scripted model's planted break is (``a_break(*PLANTED)``): the user's model, at ``mine/model.py:12``.
PLANTED = ("mine/model.py", 12, "user")


def check(model: Any, level: Level, **kwargs: Any) -> CheckResult:
    return run_check(model, "scripted", "greedy", level, "eager", NEW_TOKENS, **kwargs)
