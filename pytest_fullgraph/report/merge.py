"""Merging shard reports (xdist runs, CI matrix jobs) into one report of one configuration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_fullgraph.core.results import CheckResult
from pytest_fullgraph.report.schema import Report, ReportError
from pytest_fullgraph.report.shard import missing_shards, shard_order

#: Environment keys every shard must share: a merged report describes one configuration.
MUST_MATCH = ("torch", "transformers", "backend", "max_new_tokens", "run_slow", "strict", "breaks", "device",
              "attn_implementation", "recompiles")
#: Values that mean the default: reports from before ``--fullgraph-device`` ran on the CPU, and named "none" a
#: run in which no check reached a model; reports from before ``--fullgraph-recompiles`` made one call per check.
DEFAULTS = {"device": ("cpu", (None, "none")), "recompiles": ("off", (None,))}
#: What a mismatch of each key means, for the error message.
_MEANING = {"run_slow": "tier (run_slow)", "strict": "strictness", "breaks": "break mode",
            "attn_implementation": "attention implementation", "recompiles": "second requests (--fullgraph-recompiles)"}
#: List-valued keys merged as a sorted union (the shards' models together are the merged run's models).
UNION_KEYS = ("models", "dtypes")
#: The shard each report ran (``--fullgraph-shard``): merged into the sorted list of shards, beside
#: ``shards_missing``, the shards of the same run no merged report covers (the gate fails on them).
SHARD_KEY, MISSING_KEY = "shard", "shards_missing"
#: Dict-valued keys merged key by key (legends of levels and scenarios).
DICT_KEYS = ("levels", "scenarios", "scenario_features", "exactness_settings")


def merge(reports: Iterable[tuple[str, Report]]) -> Report:
    """Union of shard reports.

    Shards of different configurations (``MUST_MATCH``) are refused with a one-line error, as is the same
    check with different outcomes in two shards. Other environment values that differ between shards
    (platform, git revision, ...) become the sorted list of their values; ``merged_from`` names the shards.
    """
    sources: list[str] = []
    environments: list[dict[str, Any]] = []
    by_key: dict[tuple[str, str, str, str], tuple[str, CheckResult]] = {}
    crashed: list[dict[str, str]] = []
    exit_statuses: list[int] = []
    interrupted = False
    signals: set[str] = set()
    stored_help: dict[str, Any] = {}
    for source, report in reports:
        if environments:
            _check_same_configuration(source, report.environment, environments[0])
        sources.append(source)
        environments.append(report.environment)
        crashed.extend(report.crashed_workers)
        stored_help.update(report.stored_help)  # shards of one configuration ran one torch: the same words
        interrupted |= report.interrupted
        if report.run.get("signal"):
            signals.add(report.run["signal"])
        if isinstance(report.run.get("exitstatus"), int):
            exit_statuses.append(report.run["exitstatus"])
        for result in report.checks:
            if result.key in by_key and by_key[result.key][1].outcome != result.outcome:
                raise ReportError(f"{source}: check {result.check_id} is {result.outcome!r} there but "
                                  f"{by_key[result.key][1].outcome!r} in {by_key[result.key][0]}")
            by_key[result.key] = (source, result)
    if not environments:
        raise ReportError("no reports to merge")
    run = {"exitstatus": next((status for status in exit_statuses if status != 0), 0 if exit_statuses else None),
           "interrupted": interrupted, **({"signal": ",".join(sorted(signals))} if signals else {})}
    return Report(_merged_environment(environments, sources), [r for _, r in by_key.values()], crashed, run,
                  stored_help)


def uneven_levels(checks: Iterable[CheckResult]) -> list[str]:
    """``while: 140 of 196 models`` for each level that not every model of the report was checked at, in the order
    the levels first appear: a merge that left out a report (or a run that selected levels per model) says so."""
    models_at: dict[str, set[str]] = {}
    models: set[str] = set()
    for result in checks:
        models_at.setdefault(result.level, set()).add(result.model)
        models.add(result.model)
    return [f"{level}: {len(found)} of {len(models)} models" for level, found in models_at.items()
            if len(found) < len(models)]


def _check_same_configuration(source: str, environment: dict[str, Any], first: dict[str, Any]) -> None:
    for name in MUST_MATCH:
        value, earlier = _normalized(name, environment.get(name)), _normalized(name, first.get(name))
        if value != earlier:
            raise ReportError(f"{source}: {_MEANING.get(name, name)} is {value!r} but an earlier "
                              f"report has {earlier!r}; merge reports of one configuration")


def _normalized(name: str, value: Any) -> Any:
    default, meaning_default = DEFAULTS.get(name, (None, ()))
    return default if value in meaning_default else value


def _merged_environment(environments: list[dict[str, Any]], sources: list[str]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name in dict.fromkeys(key for environment in environments for key in environment):
        values = [environment[name] for environment in environments if name in environment]
        if name == SHARD_KEY:
            flat = {label for value in values for label in ([value] if isinstance(value, str) else value or [])}
            labels = sorted(flat, key=shard_order)
            merged[name] = labels or None
            merged[MISSING_KEY] = missing_shards(labels)
        elif name == MISSING_KEY:
            continue  # recomputed from the shards above
        elif name in UNION_KEYS:
            merged[name] = sorted({item for value in values for item in (value or [])})
        elif name in DICT_KEYS:
            merged[name] = {key: text for value in values for key, text in (value or {}).items()}
        elif all(value == values[0] for value in values):
            merged[name] = values[0]
        else:
            merged[name] = sorted({str(value) for value in values})
    merged["merged_from"] = sources
    return merged

