"""The report file: its data model, reading (with one-line errors for bad files) and atomic writing."""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.results import READABLE_SCHEMA_VERSIONS, SCHEMA, SCHEMA_VERSION, CheckResult

if TYPE_CHECKING:
    from pytest_fullgraph.break_help import BreakHelp

JSON_NAME = "fullgraph-report.json"
MARKDOWN_NAME = "fullgraph-report.md"


class ReportError(Exception):
    """A report file that cannot be used; the message names the file and what is wrong."""


@dataclass
class Report:
    environment: dict[str, Any]
    checks: list[CheckResult] = field(default_factory=list)
    #: one entry per xdist worker that died: ``node``, ``error`` and, when known, the ``test`` it was running
    crashed_workers: list[dict[str, str]] = field(default_factory=list)
    #: how the run ended: ``exitstatus`` (pytest's exit code) and ``interrupted`` (Ctrl-C, or a shard
    #: stopped early); an interrupted report holds only the checks that finished
    run: dict[str, Any] = field(default_factory=lambda: {"exitstatus": None, "interrupted": False})
    #: PyTorch's help by GB id as the run's torch gave it (``break_help`` in the JSON, read back): collate, merge
    #: and render need no torch, and show the help of the release that ran, not of the one that reads
    stored_help: dict[str, BreakHelp] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return bool(self.run.get("interrupted"))

    def sorted_checks(self) -> list[CheckResult]:
        return sorted(self.checks, key=lambda result: result.key)

    def to_dict(self) -> dict[str, Any]:
        from pytest_fullgraph.report.audit import model_summaries

        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "environment": self.environment,
            "run": self.run,
            "crashed_workers": sorted(self.crashed_workers, key=lambda w: (w.get("node", ""), w.get("test", ""))),
            "checks": [result.to_dict() for result in self.sorted_checks()],
            # derived from the checks for readers of the JSON; recomputed, never read back
            "models": [summary.to_dict() for summary in model_summaries(self.checks)],
            # the run's torch's words, read back by collate, merge and render (which need no torch)
            "break_help": {gb_id: found.to_dict() for gb_id, found in self.break_help().items()},
        }

    def break_help(self) -> dict[str, BreakHelp]:
        """PyTorch's explanation and specific hints for each GB id the checks' breaks have: as stored with the
        report (the run's torch), else from the installed torch's graph-break registry; none without either."""
        from pytest_fullgraph.break_help import help_for_ids

        records = [record for result in self.checks for record in result.break_records()]
        wanted = {gb_id for record in records
                  for gb_id in (record.gb_id, record.cause.gb_id if record.cause else None) if gb_id}
        found = {gb_id: self.stored_help[gb_id] for gb_id in wanted if gb_id in self.stored_help}
        missing = sorted(wanted - set(found))
        if missing and _torch_importable():
            found.update(help_for_ids(list(missing)))
        return dict(sorted(found.items()))

    @classmethod
    def from_dict(cls, data: Any, source: str) -> Report:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ReportError(f"{source}: not a pytest_fullgraph report (expected \"schema\": \"{SCHEMA}\")")
        if data.get("version") not in READABLE_SCHEMA_VERSIONS:
            raise ReportError(f"{source}: report schema version {data.get('version')!r} is not supported; "
                              f"this pytest_fullgraph reads versions "
                              f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}")
        try:
            checks = [CheckResult.from_dict(item) for item in data["checks"]]
            run = dict(data.get("run") or {"exitstatus": None, "interrupted": False})
            from pytest_fullgraph.break_help import BreakHelp

            stored = {str(gb_id): BreakHelp.from_dict(entry) for gb_id, entry in (data.get("break_help") or {}).items()}
            return cls(dict(data["environment"]), checks, [dict(w) for w in data.get("crashed_workers", [])], run,
                       stored)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ReportError(f"{source}: malformed report ({type(error).__name__}: {error})") from None


def _torch_importable() -> bool:
    """Whether this process can ask torch for help (CI's collate job installs no torch)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, as a test blocks it
        return False


def environment(settings: dict[str, Any], descriptions: dict[str, Any]) -> dict[str, Any]:
    """Versions and machine facts that explain a report, and the settings that produced it.

    ``device`` is where the checks ran (``--fullgraph-device``, in ``settings``; whether an accelerator exists
    is ``cuda_available``); ``descriptions`` holds the ``levels`` and ``scenarios`` legends.
    """
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda_available": torch.cuda.is_available(),
        "git_revision": git_revision(),
        **settings,
        **descriptions,
    }


@functools.cache
def git_revision() -> str | None:
    """The working tree's commit, read once per process: the session reads it at its start, so a report written
    after an hour-long run names the code that ran, not a commit made meanwhile."""
    try:
        completed = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                   check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() or None if completed.returncode == 0 else None


def load(path: str | Path) -> Report:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ReportError(f"{path}: cannot read ({error.strerror or error})") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ReportError(f"{path}: not valid JSON ({error})") from None
    return Report.from_dict(data, str(path))


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename, so an interrupted run never leaves a truncated file.

    The file gets the mode any file the user writes gets (0666 less the umask), not the temporary file's 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write(report: Report, directory: str | Path) -> list[Path]:
    from pytest_fullgraph.report.render import markdown

    directory = Path(directory)
    json_path, markdown_path = directory / JSON_NAME, directory / MARKDOWN_NAME
    write_atomic(json_path, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    write_atomic(markdown_path, markdown(report))
    return [json_path, markdown_path]
