"""bench/generation.py's and bench/export_paths.py's tables rendered from fake raw output (no torch, no measuring):
the lines each command prints are ``table(raw)`` of the raw output it keeps with ``--json``."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import pytest

from tests.bench.bench_modules import bench_module


@pytest.fixture(scope="module")
def generation() -> ModuleType:
    return bench_module("generation")


@pytest.fixture(scope="module")
def tables() -> ModuleType:
    return bench_module("generation_tables")


def _raw(rows: list[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    return {"bench": "generation", "rows": rows, "settings": settings}


def test_scaling_shows_each_backend_and_length_and_a_failure_in_its_time_column(generation: ModuleType) -> None:
    rows = [{"backend": "eager", "tokens": 4, "first_call_s": 2.6, "ms_per_token": 1.15, "peak_rss_mib": 420.0},
            {"backend": "inductor", "tokens": 64, "error": "BackendCompilerFailed: boom", "args": ["x"]}]
    assert generation.table(_raw(rows, subcommand="scaling", loop="while", model="llama")) == [
        "| loop | backend | new tokens | compile + first call (s) | steady ms/token | peak RSS (MiB) |",
        "|---|---|---|---|---|---|",
        "| while | eager | 4 | 2.6 | 1.15 | 420.0 |",
        "| while | inductor | 64 | BackendCompilerFailed: boom | - | - |"]


def test_the_variants_table_names_its_backend_in_the_last_column(generation: ModuleType) -> None:
    rows = [{"variant": "dynamic", "batch": 1, "tokens": 16, "first_call_s": 0.014, "ms_per_token": 0.617},
            {"variant": "ours_compiled_while", "batch": 4, "tokens": 64, "error": "RuntimeError: x"}]
    assert generation.table(_raw(rows, subcommand="table", backend="aot_eager")) == [
        "| variant | batch | new tokens | first call (s) | steady ms/token | backend aot_eager |",
        "|---|---|---|---|---|---|",
        "| dynamic | 1 | 16 | 0.014 | 0.617 | |",
        "| ours_compiled_while | 4 | 64 | RuntimeError: x | - | |"]


def test_cost_is_one_line_per_model_with_ratios_only_when_every_length_ran(generation: ModuleType) -> None:
    rows = [{"model": "llama", "tokens": 16, "first_call_s": 20.0, "peak_rss_mib": 480.0},
            {"model": "llama", "tokens": 256, "first_call_s": 22.0, "peak_rss_mib": 481.2},
            {"model": "gpt2", "tokens": 16, "first_call_s": 22.461, "peak_rss_mib": 476.6},
            {"model": "gpt2", "tokens": 256, "error": "IndexError: out of bounds"}]
    assert generation.table(_raw(rows, subcommand="cost", tokens=[16, 256])) == [
        "| model | 16 tokens: first call (s) / peak RSS (MiB) | 256 tokens: first call (s) / peak RSS (MiB) | "
        "time ratio 256/16 | RSS ratio |",
        "|---|---|---|---|---|",
        "| llama | 20.0 / 480.0 | 22.0 / 481.2 | 1.10 | 1.00 |",
        "| gpt2 | 22.461 / 476.6 | error: IndexError: out of bounds | - | - |"]


def _throughput_rows(model: str, batch: int, tokens: int, milliseconds: Mapping[str, float | None],
                     digests: dict[str, str]) -> list[dict[str, Any]]:
    """One model's cells at one shape, as ``_throughput`` keeps them (a variant without a time failed)."""
    return [{"variant": variant, "model": model, "batch": batch, "tokens": tokens,
             **({"ms_per_token": ms, "tokens_digest": digests[variant]} if ms else {"error": f"{variant} failed"})}
            for variant, ms in milliseconds.items()]


THROUGHPUT = {"subcommand": "throughput", "loops": ["ours_aoti"], "baselines": ["static_compiled_forward", "dynamic"],
              "dtype": "float32", "size": "tiny", "beams": 1, "assisted": False}
SAME = {"ours_aoti": "a", "static_compiled_forward": "a", "dynamic": "a"}


def test_throughput_gives_tokens_per_second_ratios_and_exactness(generation: ModuleType) -> None:
    rows = [*_throughput_rows("llama", 2, 64, {"ours_aoti": 0.05, "static_compiled_forward": 0.4, "dynamic": 0.625},
                              SAME),
            *_throughput_rows("gemma", 2, 64, {"ours_aoti": None, "static_compiled_forward": 0.5, "dynamic": 1.0},
                              SAME),
            *_throughput_rows("mpt", 2, 64, {"ours_aoti": 0.1, "static_compiled_forward": 0.5, "dynamic": 1.0},
                              {**SAME, "ours_aoti": "b"})]
    assert generation.table(_raw(rows, **THROUGHPUT, batch=[2], tokens=[64])) == [
        "| model | ours_aoti tok/s | static_compiled_forward tok/s | dynamic tok/s | "
        "ours_aoti / static_compiled_forward | ours_aoti / dynamic | exact |",
        "|---|---|---|---|---|---|---|",
        "| llama | 40000 | 5000 | 3200 | 8.0x | 12.5x | exact |",
        "| gemma | error: ours_aoti failed | 4000 | 2000 | - | - | exact |",
        "| mpt | 20000 | 4000 | 2000 | 5.0x | 10.0x | MISMATCH: ours_aoti |"]


def test_a_throughput_run_over_several_shapes_is_one_table_whose_rows_say_their_shape(
        generation: ModuleType, tables: ModuleType) -> None:
    times = {"ours_aoti": 0.05, "static_compiled_forward": 0.4, "dynamic": 0.625}
    rows = [*_throughput_rows("llama", 1, 64, times, SAME), *_throughput_rows("llama", 8, 64, times, SAME)]
    settings = {**THROUGHPUT, "batch": [1, 8], "tokens": [64]}
    assert generation.table(_raw(rows, **settings)) == [
        "| batch | new tokens | model | ours_aoti tok/s | static_compiled_forward tok/s | dynamic tok/s | "
        "ours_aoti / static_compiled_forward | ours_aoti / dynamic | exact |",
        "|---|---|---|---|---|---|---|---|---|",
        "| 1 | 64 | llama | 20000 | 2500 | 1600 | 8.0x | 12.5x | exact |",
        "| 8 | 64 | llama | 160000 | 20000 | 12800 | 8.0x | 12.5x | exact |"]
    assert tables.caption({**settings, "beams": 4}).startswith(
        "\nbatch 1 / 8, 64 new tokens, float32, tiny model, num_beams 4; tokens/s = ")


def test_what_throughput_prints_is_the_table_of_what_it_keeps(generation: ModuleType, tables: ModuleType,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The rows a user watches come in one by one; together they are ``table(raw)`` of the rows returned."""
    measured = {(variant, model, 2, 64): {"ms_per_token": 0.5, "tokens_digest": "a"}
                for variant in SAME for model in ("llama", "gemma")}
    settings = {**THROUGHPUT, "batch": [2], "tokens": [64]}
    rows = generation._throughput(("llama", "gemma"), settings, generation.Setup("float32", "tiny", 1, False),
                                  measured)
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["", tables.caption(settings).strip()]
    assert printed[2:] == generation.table(_raw(rows, **settings))
    assert [row["model"] for row in rows] == ["llama"] * 3 + ["gemma"] * 3


def test_export_paths_table_shows_each_path_and_a_failure_in_its_build_column() -> None:
    rows = [{"path": "generate", "build_s": 0.123, "ms_per_token": 3.391, "tokens_per_s": 294.9, "tokens": "exact"},
            {"path": "hf_et_helper", "build_s": 5.04, "ms_per_token": 112.081, "tokens_per_s": 8.92,
             "tokens": "differs: row 0, new token 2"},
            {"path": "hf_onnx", "error": "ImportError: no onnxruntime"}]
    assert bench_module("export_paths").table({"rows": rows, "settings": {"model": "llama"}}) == [
        "| path | build s | ms / token | tokens/s | tokens |", "|---|---|---|---|---|",
        "| generate | 0.1 | 3.39 | 295 | exact |",
        "| hf_et_helper | 5.0 | 112.08 | 9 | differs: row 0, new token 2 |",
        "| hf_onnx | error: ImportError: no onnxruntime | | | |"]
