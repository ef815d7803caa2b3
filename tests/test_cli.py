"""The command line's conventions: ``--version``, the ``pytest-fullgraph`` script, help that lists every command
with examples, a command without its subcommand, a reader that closes the pipe, and bad input as one line with
exit 2."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_fullgraph import __main__ as command_line
from tests import REPOSITORY
from tests.factories import cli

SUBCOMMANDS = {"report": ("merge", "diff", "collate", "findings"), "versions": (), "models": (), "scenarios": (),
               "levels": ()}


def test_version_reads_the_metadata_without_importing_torch() -> None:
    from importlib.metadata import version

    code = ("import sys\nfrom pytest_fullgraph.__main__ import main\n"
            "try:\n    main(['--version'])\nexcept SystemExit as end:\n    assert end.code in (0, None)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                               timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == (f"pytest_fullgraph {version('pytest_fullgraph')} (torch {version('torch')}, "
                                f"transformers {version('transformers')})\n")


def test_the_console_script_is_the_same_command() -> None:
    script = shutil.which("pytest-fullgraph", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("no pytest-fullgraph script beside this Python: reinstall the package (pip install -e .)")
    completed = subprocess.run([script, "--version"], capture_output=True, text=True, check=False, timeout=120)
    assert completed.returncode == 0 and completed.stdout == cli("--version").stdout
    usage = subprocess.run([script, "report"], capture_output=True, text=True, check=False, timeout=120)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: pytest-fullgraph report")


def test_the_help_lists_every_command_and_subcommand_with_examples() -> None:
    top = cli("--help")
    assert top.returncode == 0
    for command, subcommands in SUBCOMMANDS.items():
        assert f"\n    {command}" in top.stdout
        assert all(name in top.stdout for name in subcommands)  # collate and findings too
        text = cli(command, "--help").stdout
        assert "examples:" in text or command == "versions"
        for name in subcommands:
            assert f"python -m pytest_fullgraph report {name} " in cli(command, name, "--help").stdout


@pytest.mark.parametrize("args", [[], ["report"]])
def test_a_command_without_its_subcommand_prints_their_help(args: list[str]) -> None:
    completed = cli(*args)
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.startswith(f"usage: python -m pytest_fullgraph {' '.join(args)}".rstrip())
    assert "arguments are required" not in completed.stderr
    for name in SUBCOMMANDS if not args else SUBCOMMANDS["report"]:
        assert f"\n    {name}" in completed.stderr


@pytest.mark.parametrize("args", [["scenarios"], ["scenarios", "--json"], ["models", "llama", "--no-build"]])
@pytest.mark.breadth
def test_a_closed_pipe_ends_quietly(args: list[str]) -> None:
    """``... | head`` closes the pipe early: no BrokenPipeError traceback, and SIGPIPE's status as Unix tools give."""
    process = subprocess.Popen([sys.executable, "-m", "pytest_fullgraph", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before the command writes anything: its first write finds no reader
    error = process.stderr.read()
    assert process.wait(timeout=300) == command_line.CLOSED_PIPE
    # stderr holds only what imports print (torchao, installed with the executorch extra, warns on import)
    assert b"Traceback" not in error and b"BrokenPipe" not in error and b"Exception ignored" not in error


@pytest.mark.breadth
def test_bad_shard_costs_name_the_option_and_the_file(tmp_path: Path) -> None:
    packed = tmp_path / "costs.json.gz"
    packed.write_bytes(gzip.compress(b"{not json"))
    completed = cli("models", "llama", "--no-build", "--shard", "1/2", "--shard-costs", str(packed))
    assert completed.returncode == 2
    assert completed.stderr == f"pytest_fullgraph: error: --shard-costs: {packed}: not valid JSON (Expecting " \
                               "property name enclosed in double quotes: line 1 column 2 (char 1))\n"
    stored = REPOSITORY / "bench" / "reports" / "matrix-a-f.json.gz"
    good = cli("models", "llama,gemma", "--no-build", "--shard", "1/2", "--shard-costs", str(stored))
    assert good.returncode == 0, good.stderr


@pytest.mark.parametrize(("costs", "message"), [
    ("costs.json.gz", "*--fullgraph-shard-costs: costs.json.gz: not valid JSON*"),
    ("truncated.json.gz", "*--fullgraph-shard-costs: truncated.json.gz: cannot read as gzip*"),
    ("foreign.json", '*--fullgraph-shard-costs: foreign.json: not a pytest_fullgraph report*'),
])
def test_bad_shard_costs_in_a_run_name_the_option_and_the_file(pytester: pytest.Pytester, costs: str,
                                                               message: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    (pytester.path / "costs.json.gz").write_bytes(gzip.compress(b"{not json"))
    (pytester.path / "truncated.json.gz").write_bytes(gzip.compress(b"{}")[:12])
    (pytester.path / "foreign.json").write_text('{"a": 1}')
    result = pytester.runpytest("--fullgraph-shard=1/2", f"--fullgraph-shard-costs={costs}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "--fullgraph-shard:" not in result.stderr.str()


def test_a_gzipped_report_balances_the_shards_of_a_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    stored = REPOSITORY / "bench" / "reports" / "matrix-a-f.json.gz"
    result = pytester.runpytest("--collect-only", "--fullgraph-shard=1/2", f"--fullgraph-shard-costs={stored}")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()



@pytest.mark.parametrize(("arguments", "error"), [
    (["repro", "r.json", "-o", "out", "--timeout", "0"], "argument --timeout: '0' is not a number of seconds (more "
                                                          "than 0)"),
    (["repro", "r.json", "-o", "out", "--reduce-budget", "-1"], "argument --reduce-budget: '-1' is not a number of "
                                                               "seconds (0 or more)"),
    (["repro", "r.json", "-o", "out", "--timeout", "soon"], "argument --timeout: 'soon' is not a number of seconds "
                                                            "(more than 0)"),
])
def test_seconds_that_mean_nothing_are_refused_in_one_line(arguments: list[str], error: str) -> None:
    completed = subprocess.run([sys.executable, "-m", "pytest_fullgraph", *arguments], capture_output=True,
                               text=True, check=False)
    assert completed.returncode == 2
    assert completed.stderr.strip().splitlines()[-1].endswith(error)


def test_upstream_refuses_a_repros_directory_that_is_not_there(tmp_path: Path) -> None:
    completed = subprocess.run([sys.executable, "-m", "pytest_fullgraph", "report", "upstream", "r.json", "-o",
                                str(tmp_path), "--repros", "/nope"], capture_output=True, text=True, check=False)
    assert completed.returncode == 2
    assert completed.stderr.strip() == ("pytest_fullgraph: error: --repros /nope: not a directory (give a `repro` "
                                        "command's output directory)")


def test_levels_lists_the_built_in_levels_and_when_a_run_collects_them(capsys: pytest.CaptureFixture[str]) -> None:
    """The list an unknown ``--fullgraph-levels`` name points at, selected as that option selects."""
    assert command_line.main(["levels", "while*,hf_dynamo"]) == 0
    rows = [line.split(None, 2)[:2] for line in capsys.readouterr().out.splitlines()]
    assert rows == [["while", "default"], ["while64", "slow"], ["while256", "slow"], ["hf_dynamo", "opt-in"]]
    assert command_line.main(["levels", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 15


def test_an_unknown_level_in_the_levels_command_is_one_line_with_close_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert command_line.main(["levels", "decod"]) == 2
    assert capsys.readouterr().err == ("pytest_fullgraph: error: unknown level 'decod' (did you mean decode?); "
                                       "valid: default, all, globs such as hf_*, or one of the 15 level names "
                                       "(python -m pytest_fullgraph levels lists the built-in ones)\n")
