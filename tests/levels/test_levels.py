"""Levels from a conftest, late registration, and known limitations, run as users run the suite."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import checks_by_id, read_report

TOY_LEVEL = textwrap.dedent('''\
    from pytest_fullgraph.core.generation import generate_fn
    from pytest_fullgraph.levels.base import GRAPHS_NOT_COUNTED, Level


    class ReplayLevel(Level):
        name = "replay"
        description = "model.generate again, uncompiled: a level from a conftest"
        graph_rule = GRAPHS_NOT_COUNTED

        def run_compiled(self, model, inputs, config, backend):
            return generate_fn(model)(**inputs, generation_config=config)


    def pytest_fullgraph_register_levels(levels):
        levels.add(ReplayLevel())
''')


def test_a_level_registered_by_hook_is_in_ids_report_and_markdown(toy_project: pytest.Pytester,
                                                                  tmp_path: Path) -> None:
    toy_project.makepyfile(conftest=(toy_project.path / "conftest.py").read_text() + "\n" + TOY_LEVEL)
    result = toy_project.runpytest("--fullgraph-models=toy", "-k", "replay", "-v", "-p", "no:cacheprovider",
                                   f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*test_generation_compiles_exactly[[]toy-greedy-replay-float32[]] PASSED*"])
    checks = checks_by_id(read_report(tmp_path))
    assert sorted(checks) == ["toy-eos-replay", "toy-greedy-replay", "toy-padded-replay", "toy-sample-replay"]
    assert {c["outcome"] for c in checks.values()} == {"pass"}
    assert read_report(tmp_path)["environment"]["levels"]["replay"].startswith("model.generate again")
    page = (tmp_path / "fullgraph-report.md").read_text()
    assert "| replay | 4 | 4 | 1 of 1 |" in page  # its row of the counts table; the model passes, so no matrix row
    assert "- level `replay`: model.generate again, uncompiled: a level from a conftest" in page


def test_fullgraph_levels_selects_by_name_glob_and_keyword_and_opt_in_levels_only_when_named(
        toy_project: pytest.Pytester) -> None:
    """An opt-in level (a conftest's, like transformers' exporter levels) is collected only when named, by
    --fullgraph-levels or by -k; a glob or a name selects any level, the slow tier's too; the header names a
    selection that is not the default."""
    toy_project.makepyfile(conftest=(toy_project.path / "conftest.py").read_text() + "\n" + TOY_LEVEL
                           + "\nReplayLevel.opt_in = True\n")

    def collected(*arguments: str) -> list[str]:
        result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-scenarios=greedy", "--co", "-q",
                                       "-p", "no:cacheprovider", *arguments)
        return [line.split("toy-greedy-")[1].split("-")[0] for line in result.stdout.lines if "toy-greedy-" in line]

    assert collected() == ["forward", "generate", "decode", "export", "while"]
    assert collected("--fullgraph-levels=default,replay") == ["forward", "generate", "decode", "export", "while",
                                                             "replay"]
    assert collected("--fullgraph-levels=WHILE*") == ["while", "while64", "while256"]
    assert "replay" in collected("--fullgraph-levels=all")
    result = toy_project.runpytest("--fullgraph-models=toy", "--fullgraph-levels=re*", "--co", "-p",
                                   "no:cacheprovider")
    result.stdout.fnmatch_lines(["fullgraph: models=toy * levels=replay"])
    # -k naming an opt-in level collects it beside the default ones, which -k then filters as usual
    assert collected("-k", "replay") == ["replay"]
    assert collected("-k", "forward or repl") == ["forward", "replay"]
    assert collected("-k", "forward") == ["forward"]  # a default level alone: nothing opt-in added
    assert collected("-k", "not replay") == ["forward", "generate", "decode", "export", "while"]
    assert collected("--fullgraph-levels=decode", "-k", "replay") == []  # an explicit selection stands


@pytest.mark.parametrize(("value", "problem"), [
    ("decod,onnx_*", "unknown level 'decod' (did you mean decode?), 'onnx_[*]' matches no level"),
    ("decod", "unknown level 'decod' (did you mean decode?)"),
    ("nope", "unknown level 'nope'"),
])
def test_an_unknown_level_is_a_usage_error_with_close_names_never_the_whole_list(pytester: pytest.Pytester,
                                                                              value: str, problem: str) -> None:
    """As for models and scenarios: at most five close names, and the command that lists them all."""
    result = pytester.runpytest("--fullgraph-models=llama", f"--fullgraph-levels={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --fullgraph-levels: {problem}; valid: default, all, globs such as hf_[*], "
                                 "or one of the 15 level names (python -m pytest_fullgraph levels lists the "
                                 "built-in ones)"])
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "while256" not in errors[0] and "hf_et_helper" not in errors[0], errors


def test_a_level_name_that_breaks_test_ids_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(TOY_LEVEL.replace('name = "replay"', 'name = "re-play"'))
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret != 0
    assert "invalid level name 're-play'" in result.stdout.str() + result.stderr.str()


def test_registration_from_a_sub_directory_conftest_says_where_it_must_happen(pytester: pytest.Pytester) -> None:
    sub = pytester.mkdir("sub")
    (sub / "conftest.py").write_text("from pytest_fullgraph import build_tiny, register_model\n"
                                     "register_model('late', lambda: build_tiny('llama'))\n")
    (sub / "test_x.py").write_text("def test_x(fullgraph_model_name):\n    pass\n")
    selected = pytester.runpytest(".", "--fullgraph-models=late")
    assert selected.ret == pytest.ExitCode.USAGE_ERROR
    selected.stderr.fnmatch_lines(["ERROR: --fullgraph-models: unknown model 'late'*; a model of your own: register "
                                   "it in the rootdir conftest.py or a plugin (a sub-directory's conftest.py loads "
                                   "too late)"])
    collected = pytester.runpytest(".", "--fullgraph-models=llama")
    assert collected.ret != 0
    collected.stdout.fnmatch_lines(["*register_model('late') ran after the session chose its models*"])
    # a conftest next to the path given on the command line is loaded before the session starts
    pytester.runpytest("sub", "--fullgraph-models=late").assert_outcomes(passed=1)


def test_a_register_hook_in_a_sub_directory_conftest_is_an_error_naming_it(pytester: pytest.Pytester) -> None:
    sub = pytester.mkdir("sub")
    (sub / "conftest.py").write_text("def pytest_fullgraph_register_models(registry):\n    pass\n")
    (sub / "test_x.py").write_text("def test_x():\n    pass\n")
    result = pytester.runpytest(".", "--fullgraph-models=llama")
    assert result.ret != 0
    assert ("implements pytest_fullgraph_register_models but was loaded during collection"
            in result.stdout.str() + result.stderr.str())


def test_a_model_with_a_known_reason_is_skipped_with_it_and_never_built(toy_project: pytest.Pytester,
                                                                       tmp_path: Path) -> None:
    toy_project.makepyfile(conftest=(toy_project.path / "conftest.py").read_text() + textwrap.dedent('''
        def never_build():
            raise AssertionError("a model with a known reason must not be built")

        register_model("toy_known", never_build, known_reason="its cache needs a custom layer")
    '''))
    result = toy_project.runpytest("--fullgraph-models=toy_known", "-k", "greedy and forward", "-rs",
                                   "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*toy_known: skipped: its cache needs a custom layer*"])
    check = checks_by_id(read_report(tmp_path))["toy_known-greedy-forward"]
    assert (check["outcome"], check["message"]) == ("skip", "skipped: its cache needs a custom layer")
    strict = toy_project.runpytest("--fullgraph-models=toy_known", "-k", "greedy and forward", "--fullgraph-strict",
                                   "-p", "no:cacheprovider")
    strict.assert_outcomes(skipped=1)  # strictness is about breaks; a known reason is not a finding


#: A level that never finishes unless the prompts are padded; its hook replaces TOY_LEVEL's (same name).
STUCK_LEVEL = TOY_LEVEL + textwrap.dedent('''
    import time


    class StuckLevel(ReplayLevel):
        name = "stuck"
        description = "a compile that never ends unless the prompts are padded"

        def run_compiled(self, model, inputs, config, backend):
            if bool(inputs["attention_mask"].all()):
                time.sleep(60)
            return super().run_compiled(model, inputs, config, backend)


    def pytest_fullgraph_register_levels(levels):
        levels.add(StuckLevel())
''')


def test_a_check_that_hangs_times_out_as_an_error_and_the_run_goes_on(toy_project: pytest.Pytester,
                                                                      tmp_path: Path) -> None:
    toy_project.makepyfile(conftest=(toy_project.path / "conftest.py").read_text() + "\n" + STUCK_LEVEL)
    result = toy_project.runpytest("--fullgraph-models=toy", "-k", "stuck and (greedy or padded)",
                                   "--fullgraph-timeout=2", "-p", "no:cacheprovider", f"--fullgraph-report={tmp_path}")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*error: timeout after 2 s, during compiled generation*"])
    report = read_report(tmp_path)
    checks = checks_by_id(report)
    assert checks["toy-greedy-stuck"]["outcome"] == "error" and checks["toy-padded-stuck"]["outcome"] == "pass"
    assert report["environment"]["timeout"] == 2.0
    # the model's facts travel with every check, for the flag audit
    assert (checks["toy-padded-stuck"]["model_class"], checks["toy-padded-stuck"]["can_compile_fullgraph"]) == (
        "LlamaForCausalLM", True)
    assert 0 < checks["toy-padded-stuck"]["parameters"] < 100_000
    assert [model["model"] for model in report["models"]] == ["toy"]


def test_a_bad_timeout_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    for bad in ("-1", "soon", "nan"):
        result = pytester.runpytest(f"--fullgraph-timeout={bad}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*--fullgraph-timeout={bad!r} is not a number of seconds; use a number >= 0*"])


@pytest.mark.parametrize(("mode", "run_slow", "generate", "others"), [
    ("auto", False, False, True),  # the fast tier: generate's first break, every break elsewhere
    ("auto", True, True, True),
    ("all", False, True, True),
    ("first", True, False, False),
])
def test_the_break_mode_decides_which_levels_record_every_break(mode: str, run_slow: bool, generate: bool, others: bool,
                                                               modules_loaded_outside_pytester: None) -> None:
    from pytest_fullgraph.levels.builtin import builtin_levels
    from pytest_fullgraph.plugin.settings import Settings

    settings = Settings(models=("llama",), backend="aot_eager", max_new_tokens=4, run_slow=run_slow, strict=False,
                        breaks=mode)
    levels = builtin_levels()
    assert settings.records_every_break(levels["generate"]) is generate
    assert {settings.records_every_break(levels[name]) for name in levels if name != "generate"} == {others}


def test_nothing_compiled_says_why_generate_compiled_nothing() -> None:
    """generate compiles the forward only on a compileable cache it built, through get_compiled_call: mpt's config
    turns the cache off, minimax keeps a cache of its own class, and get_compiled_call skips llama4 by its type;
    "model type 'mpt'" alone sent readers to the model's code."""
    from transformers import GenerationConfig, LlamaForCausalLM

    from pytest_fullgraph import build_tiny
    from pytest_fullgraph.levels.auto_compile import why_generate_compiled_nothing

    model, config = build_tiny("llama"), GenerationConfig(max_new_tokens=2)
    assert why_generate_compiled_nothing(model, config) == "model type 'llama' or its cache is not compiled by generate"
    model.generation_config.use_cache = False
    assert why_generate_compiled_nothing(model, config).startswith(
        "the generation config, merged with the model's, sets use_cache=False")
    assert why_generate_compiled_nothing(model, GenerationConfig(max_new_tokens=2, use_cache=True)) == \
        "model type 'llama' or its cache is not compiled by generate"  # the defaults: llama's sizes, a cache

    assert re.fullmatch(r"transformers' get_compiled_call \(transformers/modeling_utils.py:\d+\) hands generate "
                        r"Llama4ForCausalLM's forward uncompiled \(by model type\)",
                        why_generate_compiled_nothing(build_tiny("llama4_text"), config))

    class OwnCacheLM(LlamaForCausalLM):
        @classmethod
        def _supports_default_dynamic_cache(cls) -> bool:
            return False

    model.generation_config.use_cache = True
    model.__class__ = OwnCacheLM
    assert why_generate_compiled_nothing(model, config).startswith(
        "generate builds OwnCacheLM no cache, since it keeps one of its own class")


def test_nothing_compiled_in_draft_modes_says_which_decision_of_generate() -> None:
    """Assisted decoding runs the target's first forward uncompiled: a generation that ends in it compiled nothing
    through nobody's fault (a skip that says so), while a cache whose layers refuse compiling is transformers'
    choice (an error naming them); both were "model type ... or its cache is not compiled" before."""
    from pytest_fullgraph import build_tiny
    from pytest_fullgraph.check.run import run_check
    from pytest_fullgraph.core.results import ERROR, SKIP

    one_token = run_check(build_tiny("llama"), "llama", "prompt_lookup", "forward", "aot_eager", 1)
    assert one_token.outcome == SKIP, one_token.message
    assert one_token.message.startswith("not judged, nothing was compiled: transformers ran level 'forward' eagerly "
                                        "(transformers' assisted decoding runs the target's first forward")
    assert "filled max_new_tokens=1" in one_token.message

    recording = run_check(build_tiny("lfm3"), "lfm3", "assisted", "forward", "aot_eager", 4)
    assert recording.outcome == ERROR, recording.message
    assert re.search(r"the StaticCache generate built has layers that say they are not compileable \("
                     r"LinearAttentionLayer recording its past, for assisted decoding's crop, at "
                     r"transformers/cache_utils.py:\d+\)", recording.message), recording.message


def test_watching_generate_leaves_the_model_as_it_was_when_the_rerun_fails() -> None:
    """The watch shadows ``_valid_auto_compile_criteria`` on the instance and hooks the forward; a rerun that
    raises still tells what it saw, and the model keeps neither."""
    from pytest_fullgraph import build_tiny
    from pytest_fullgraph.levels.auto_compile import watch_auto_compile

    model = build_tiny("llama")

    def rerun() -> None:
        decide: Any = model._valid_auto_compile_criteria  # the watch's stand-in, as generate would call it
        decide({"cache": None}, model.generation_config)
        model(input_ids=model.dummy_inputs["input_ids"][:, :2])
        raise RuntimeError("the rerun fails after one forward")

    seen = watch_auto_compile(model, rerun)
    assert (seen.cache, seen.chose_compile, seen.forwards) == ("no cache", False, 1)
    assert seen.why("assisted_generation", 4) == \
        "generate built no cache, with which _valid_auto_compile_criteria keeps the forward uncompiled"
    assert "_valid_auto_compile_criteria" not in vars(model) and not model._forward_pre_hooks


def test_the_slow_tier_adds_the_long_while_and_cudagraphs_levels_and_neither_tier_the_opt_in_ones() -> None:
    """The unit form of the installed test that collects the suite with RUN_SLOW (a breadth test)."""
    from pytest_fullgraph.levels.builtin import builtin_levels

    levels = builtin_levels()
    fast, slow = levels.default(run_slow=False), levels.default(run_slow=True)
    assert fast == ("forward", "generate", "decode", "export", "while")
    assert set(slow) - set(fast) == {"while64", "while256", "cudagraphs", "cudagraphs_while"}
    assert not {"cache", "hf_dynamo", "hf_onnx", "hf_executorch", "hf_et_helper", "hf_openvino"} & set(slow)
