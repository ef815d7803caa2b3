"""A whole generation exported, saved, and loaded in a fresh process: exactly ``model.generate``'s tokens, and
one-line errors for artifacts that cannot be used."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from pytest_fullgraph import ArtifactError, build_tiny, load_generate, save_generate
from pytest_fullgraph.levels.artifacts import RUNTIMES, metadata_path
from tests.levels.conftest import (
    HAS_EXECUTORCH,
    SHAPES,
    WHILE_BOUND,
    WHILE_LENGTHS,
    Exports,
    left_padded,
    load_in_a_fresh_process,
)


@pytest.fixture(scope="module")
def exported_sampling(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny llama sampling (top-k, a left-padded batch) exported with its noise as an input, and generate's
    tokens for three seeds."""
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import export_generate

    model = build_tiny("llama")
    config = GenerationConfig(max_new_tokens=4, do_sample=True, top_k=20, pad_token_id=0)
    input_ids, attention_mask = left_padded(2, 8)
    cases = []
    for seed in range(3):
        torch.manual_seed(seed)
        expected = cast(Any, model).generate(input_ids, attention_mask=attention_mask, generation_config=config)
        cases.append({"input_ids": input_ids, "attention_mask": attention_mask, "expected": expected, "seed": seed})
    directory = tmp_path_factory.mktemp("sampling_artifacts")
    torch.save(cases, directory / "cases.pt")
    return {"generate": export_generate(model, input_ids, attention_mask, config, noise_input=True),
            "inputs": directory / "cases.pt", "directory": directory}


def runtime_params(loop: str) -> list[Any]:
    """Each runtime that takes ``loop``; AOTInductor's and ExecuTorch's builds of a whole generation take a minute
    or more on 2 cores (slow tests), and ExecuTorch's rows need the extra."""
    params = []
    for name, runtime in RUNTIMES.items():
        if loop not in runtime.loop_forms:
            continue
        marks = [] if name == "pt2" else [pytest.mark.breadth]
        if name.startswith("executorch"):
            marks.append(pytest.mark.skipif(not HAS_EXECUTORCH, reason="needs pytest_fullgraph[executorch]"))
        params.append(pytest.param(name, marks=marks))
    return params


@pytest.mark.parametrize("runtime", runtime_params("unrolled"))
def test_a_saved_generation_gives_generates_tokens_in_a_fresh_process(exported: Exports, runtime: str) -> None:
    """One dynamic program (its batch bounded, as ExecuTorch needs), saved, loaded in a new process, three shapes:
    exactly generate's tokens each."""
    artifact = save_generate(exported["bounded"], exported["directory"] / "llama", runtime=runtime, model="llama")
    assert artifact.name == "llama" + RUNTIMES[runtime].suffix
    assert load_in_a_fresh_process(artifact, exported["inputs"]).splitlines() == ["equal"] * len(SHAPES)


@pytest.mark.parametrize("runtime", runtime_params("unrolled"))
@pytest.mark.breadth
def test_a_saved_sampling_program_draws_generates_tokens_in_a_fresh_process(exported_sampling: dict[str, Any],
                                                                            runtime: str) -> None:
    """Its noise drawn by load_generate's callable from the seed, as generate draws: the same tokens, seed by
    seed, in every runtime, ExecuTorch's (which has no random number generator) included."""
    artifact = save_generate(exported_sampling["generate"], exported_sampling["directory"] / "sampling",
                             runtime=runtime, model="llama")
    assert load_in_a_fresh_process(artifact, exported_sampling["inputs"]).splitlines() == ["equal"] * 3


@pytest.mark.parametrize("runtime", runtime_params("while"))
@pytest.mark.breadth
def test_a_saved_while_program_serves_every_shape_and_length_in_a_fresh_process(exported_while: dict[str, Any],
                                                                                runtime: str) -> None:
    """One while_loop program, saved, loaded in a new process: three shapes, two lengths, generate's tokens."""
    artifact = save_generate(exported_while["generate"], exported_while["directory"] / "gemma2", runtime=runtime,
                             model="gemma2")
    lines = load_in_a_fresh_process(artifact, exported_while["inputs"]).splitlines()
    assert lines == ["equal"] * len(SHAPES) * len(WHILE_LENGTHS)


@pytest.mark.breadth
def test_a_while_program_takes_lengths_up_to_its_bound_and_an_unrolled_one_only_its_own(
        exported_while: dict[str, Any], exported: Exports) -> None:
    artifact = save_generate(exported_while["generate"], exported_while["directory"] / "bound")
    metadata = json.loads(metadata_path(artifact).read_text())
    assert (metadata["loop"], metadata["max_new_tokens"]) == ("while", WHILE_BOUND)
    assert metadata["inputs"]["max_new_tokens"] == {"shape": [], "dtype": "torch.int64"}
    loaded = load_generate(artifact)
    ids, mask = left_padded(2, 8)
    for wrong in (0, WHILE_BOUND + 1):
        with pytest.raises(ArtifactError, match=rf"max_new_tokens={wrong} is outside what this program takes "
                                                rf"\(1 to {WHILE_BOUND}, "):
            loaded(ids, mask, max_new_tokens=wrong)
    unrolled = load_generate(save_generate(exported["static"], exported["directory"] / "fixed_length"))
    with pytest.raises(ArtifactError, match=r"an unrolled program generates its 4 tokens; max_new_tokens=3 needs a "
                                            r"program exported with loop='while'"):
        unrolled(ids, mask, max_new_tokens=3)


def test_the_metadata_says_what_is_baked_in_and_what_it_takes(exported: Exports) -> None:
    artifact = save_generate(exported["bounded"], exported["directory"] / "meta", model="llama")
    metadata = json.loads(metadata_path(artifact).read_text())
    assert (metadata["runtime"], metadata["model"], metadata["loop"], metadata["max_new_tokens"]) == (
        "pt2", "llama", "unrolled", 4)
    assert metadata["inputs"]["input_ids"] == {"shape": [[2, 3], [2, 16]], "dtype": "torch.int64"}
    assert metadata["cache_len"] == 16 + 4
    assert metadata["generation_config"]["do_sample"] is False
    assert metadata["versions"]["torch"] == torch.__version__


def test_max_batch_size_bounds_a_dynamic_export_only() -> None:
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate

    model, config = build_tiny("llama"), GenerationConfig(max_new_tokens=2, do_sample=False, pad_token_id=0)
    ids, mask = left_padded(3, 8)
    with pytest.raises(UnsupportedGeneration, match="max_batch_size bounds a dynamic export: give dynamic=True"):
        export_generate(model, ids, mask, config, max_batch_size=4)
    with pytest.raises(UnsupportedGeneration, match=r"max_batch_size=2 is smaller than the example batch \(3\)"):
        export_generate(model, ids, mask, config, dynamic=True, max_batch_size=2)


def test_a_bounded_program_says_its_bound_and_refuses_a_larger_batch(exported: Exports) -> None:
    bounded = load_generate(save_generate(exported["bounded"], exported["directory"] / "bounded"))
    assert bounded.artifact_metadata["inputs"]["input_ids"]["shape"] == [[2, 3], [2, 16]]  # type: ignore[attr-defined]
    with pytest.raises(ArtifactError, match=r"\(4, 8\) torch.int64, but the program takes \(2..3, 2..16\)"):
        bounded(torch.ones(4, 8, dtype=torch.long), torch.ones(4, 8, dtype=torch.long))


@pytest.mark.breadth  # the bounded program's refusal above takes the same path
def test_other_shapes_are_refused_before_the_program_runs(exported: Exports) -> None:
    fixed = load_generate(save_generate(exported["static"], exported["directory"] / "shapes"))
    with pytest.raises(ArtifactError, match=r"input_ids is \(3, 8\) torch.int64, but the program takes \(2, 8\) "
                                            r"torch.int64"):
        fixed(torch.ones(3, 8, dtype=torch.long), torch.ones(3, 8, dtype=torch.long))
    ranged = load_generate(save_generate(exported["generate"], exported["directory"] / "ranged"))
    with pytest.raises(ArtifactError, match=r"\(2, 17\) torch.int64, but the program takes \(2.., 2..16\)"):
        ranged(torch.ones(2, 17, dtype=torch.long), torch.ones(2, 17, dtype=torch.long))


def test_dynamic_export_refuses_settings_built_for_one_prompt_length() -> None:
    from transformers import GenerationConfig

    from pytest_fullgraph.loop.decode import UnsupportedGeneration, export_generate

    input_ids, attention_mask = left_padded(2, 8)
    config = GenerationConfig(max_new_tokens=4, min_new_tokens=2, do_sample=False, pad_token_id=0)
    with pytest.raises(UnsupportedGeneration, match=r"dynamic=True\) does not support min_new_tokens=2"):
        export_generate(build_tiny("llama"), input_ids, attention_mask, config, dynamic=True)


def test_a_corrupted_artifact_is_a_one_line_error(exported: Exports) -> None:
    artifact = save_generate(exported["bounded"], exported["directory"] / "broken")
    artifact.write_bytes(artifact.read_bytes()[:200])
    with pytest.raises(ArtifactError, match=r"broken.pt2: cannot load the pt2 artifact \("):
        load_generate(artifact)


def test_an_artifact_of_another_torch_release_is_refused(exported: Exports) -> None:
    artifact = save_generate(exported["bounded"], exported["directory"] / "old")
    metadata = json.loads(metadata_path(artifact).read_text())
    metadata["versions"]["torch"] = "1.13.1+cpu"  # a release no environment of the suite has
    metadata_path(artifact).write_text(json.dumps(metadata))
    with pytest.raises(ArtifactError, match=rf"old.pt2: saved with torch 1.13.1\+cpu, this is torch "
                                            rf"{re.escape(torch.__version__)}; export and save it again"):
        load_generate(artifact)


@pytest.mark.parametrize(("metadata", "message"), [
    (None, "cannot read the artifact's metadata"),
    ("{not json", "the artifact's metadata is not valid JSON"),
    ('{"schema": "something else"}', "not a pytest_fullgraph artifact's metadata"),
])
def test_missing_or_foreign_metadata_is_refused(tmp_path: Path, metadata: str | None, message: str) -> None:
    artifact = tmp_path / "x.pt2"
    artifact.write_bytes(b"")
    if metadata is not None:
        metadata_path(artifact).write_text(metadata)
    with pytest.raises(ArtifactError, match=message):
        load_generate(artifact)


def test_a_missing_program_is_named_before_its_metadata(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match=r"nothere.pt2: no such artifact; load_generate takes the path "
                                            r"save_generate returned, or a file --fullgraph-artifacts wrote$"):
        load_generate(tmp_path / "nothere.pt2")
    (tmp_path / "llama-greedy-export.pt2").write_bytes(b"")
    with pytest.raises(ArtifactError, match=r"no such artifact \(did you mean llama-greedy-export.pt2\?\)"):
        load_generate(tmp_path / "llama-greedy-export")


def test_only_what_export_generate_returned_can_be_saved(exported: Exports, tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="save_generate takes what export_generate returned"):
        save_generate(lambda ids, mask: ids, tmp_path / "x")
    with pytest.raises(ArtifactError, match="runtime 'pte' is not known; use one of pt2, aoti"):
        save_generate(exported["bounded"], tmp_path / "x", runtime="pte")
