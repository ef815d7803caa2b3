"""Exported generations shared by the artifact tests (built once per package: each export takes seconds to
minutes), the shapes they serve, and loading a saved one in a fresh process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from pytest_fullgraph import build_tiny

LOAD_IN_A_FRESH_PROCESS = """
import sys, torch
from pytest_fullgraph import load_generate
generate = load_generate(sys.argv[1])
for case in torch.load(sys.argv[2]):
    if "seed" in case:  # a sampling program draws its noise input from torch's generator, as generate draws
        torch.manual_seed(case["seed"])
    lengths = {"max_new_tokens": case["max_new_tokens"]} if "max_new_tokens" in case else {}
    tokens = generate(case["input_ids"], case["attention_mask"], **lengths)
    same = torch.equal(tokens, case["expected"])
    print("equal" if same else f"differ: {tokens.tolist()} {case['expected'].tolist()}")
"""


#: Batch and prompt length of the shapes one dynamic program serves; the first is the export's example.
SHAPES = ((2, 8), (3, 5), (2, 16))


def left_padded(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(3, 100, (batch, length), generator=torch.Generator().manual_seed(batch * 100 + length))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0  # left padding: the mask is an input of the program, not baked in
    return input_ids, attention_mask


class Exports:
    """Programs exported on first use (seconds each), and values given up front: the fast tests use the bounded
    program only, so a run of them makes only that one."""

    def __init__(self, makers: dict[str, Callable[[], Any]], **values: Any) -> None:
        self._makers, self._made = makers, dict(values)

    def __getitem__(self, name: str) -> Any:
        if name not in self._made:
            self._made[name] = self._makers[name]()
        return self._made[name]


@pytest.fixture(scope="package")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exports:
    """The tiny llama's greedy generation exported with dynamic shapes (``generate``; ``bounded``: its batch bounded
    too) and for one shape (``static``), and generate's tokens for every shape of ``SHAPES``, saved to disk."""
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import export_generate

    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=0)
    cases = []
    for batch, length in SHAPES:
        input_ids, attention_mask = left_padded(batch, length)
        expected = cast(Any, model).generate(input_ids, attention_mask=attention_mask, generation_config=config)
        cases.append({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected})
    directory = tmp_path_factory.mktemp("artifacts")
    inputs = directory / "cases.pt"
    torch.save(cases, inputs)
    example = (cases[0]["input_ids"], cases[0]["attention_mask"])
    return Exports({"generate": lambda: export_generate(model, *example, config, dynamic=True, max_prompt_length=16),
                    "bounded": lambda: export_generate(model, *example, config, dynamic=True, max_prompt_length=16,
                                                       max_batch_size=max(batch for batch, _ in SHAPES)),
                    "static": lambda: export_generate(model, *example, config)},
                   inputs=inputs, directory=directory)


#: The while form's bound, past the tiny gemma2's sliding window (16), and the lengths one program serves.
WHILE_BOUND, WHILE_LENGTHS = 20, (5, 20)


@pytest.fixture(scope="package")
def exported_while(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """gemma2's greedy generation in the ``while`` form, exported once for batch sizes from 2, prompts up to 16
    and any length up to ``WHILE_BOUND``, with generate's tokens for every shape and length."""
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import export_generate

    model = build_tiny("gemma2")
    cases = []
    for batch, length in SHAPES:
        input_ids, attention_mask = left_padded(batch, length)
        for new_tokens in WHILE_LENGTHS:
            config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None)
            expected = cast(Any, model).generate(input_ids, attention_mask=attention_mask, generation_config=config)
            cases.append({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected,
                          "max_new_tokens": new_tokens})
    directory = tmp_path_factory.mktemp("while_artifacts")
    inputs = directory / "cases.pt"
    torch.save(cases, inputs)
    config = GenerationConfig(max_new_tokens=WHILE_BOUND, do_sample=False, pad_token_id=0, eos_token_id=None)
    program = export_generate(model, cases[0]["input_ids"], cases[0]["attention_mask"], config, dynamic=True,
                              max_prompt_length=16, loop="while")
    return {"generate": program, "inputs": inputs, "directory": directory}


HAS_EXECUTORCH = importlib.util.find_spec("executorch") is not None


def load_in_a_fresh_process(artifact: Path, inputs: Path) -> str:
    completed = subprocess.run([sys.executable, "-c", LOAD_IN_A_FRESH_PROCESS, str(artifact), str(inputs)],
                               capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.strip()
