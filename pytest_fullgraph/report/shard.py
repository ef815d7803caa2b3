"""Dividing a selection of models among N machines (``--fullgraph-shard=I/N``).

Every machine computes the same partition from the same inputs, so the shards are disjoint and together hold
every selected model. Without costs the split is even by count; with costs (seconds per model, summed from a
previous report's check durations) each model goes, most expensive first, to the shard with the least work so
far, so one slow model family does not make one job the run's long pole. No torch import.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_fullgraph.core.results import check_seconds

if TYPE_CHECKING:  # the report package imports this module to merge shards
    from pytest_fullgraph.report.schema import Report

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
#: The cost of a model a costs report does not mention, when it mentions no model of the selection either.
DEFAULT_COST = 1.0


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(value: str, source: str) -> Shard:
    """``"2/8"`` -> ``Shard(2, 8)``; anything else is a ``ValueError`` naming the value and the form allowed."""
    match = _SHARD.fullmatch(value)
    if match is not None:
        index, count = int(match.group(1)), int(match.group(2))
        if 1 <= index <= count:
            return Shard(index, count)
    raise ValueError(f"{source}: {value!r} is not a shard; expected I/N with 1 <= I <= N, e.g. 1/4")


def model_costs(report: Report) -> dict[str, float]:
    """Seconds each model's checks took in ``report``, summed over its checks (``check_seconds``: each check's
    ``duration_s``, or in older reports its eager, compile and diagnosis timings)."""
    costs: dict[str, float] = {}
    for result in report.checks:
        costs[result.model] = costs.get(result.model, 0.0) + check_seconds(result)
    return costs


def partition(models: Sequence[str], count: int, costs: Mapping[str, float] | None = None) -> list[tuple[str, ...]]:
    """``count`` disjoint parts whose union is ``models``, each sorted by name.

    A model without a known positive cost counts as the median known cost of the selection (``DEFAULT_COST``
    when none is known), so a new model neither lands everywhere nor nowhere.
    """
    if count < 1:
        raise ValueError(f"cannot divide models into {count} shards; the count must be at least 1")
    names = sorted(dict.fromkeys(models))
    known = [costs[name] for name in names if costs and costs.get(name, 0.0) > 0.0]
    fallback = statistics.median(known) if known else DEFAULT_COST
    cost = {name: costs[name] if costs and costs.get(name, 0.0) > 0.0 else fallback for name in names}
    parts: list[list[str]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for name in sorted(names, key=lambda item: (-cost[item], item)):
        lightest = min(range(count), key=lambda index: (loads[index], len(parts[index]), index))
        parts[lightest].append(name)
        loads[lightest] += cost[name]
    return [tuple(sorted(part)) for part in parts]


def select_shard(models: Sequence[str], shard: Shard, costs: Mapping[str, float] | None = None) -> tuple[str, ...]:
    """The models shard ``shard`` runs; an empty shard is a ``ValueError`` (more shards than models)."""
    chosen = partition(models, shard.count, costs)[shard.index - 1]
    if not chosen:
        raise ValueError(f"shard {shard.label} is empty: {len(models)} selected model(s) cannot fill {shard.count} "
                         f"shards; use at most {len(models)}")
    return chosen


def shard_order(label: str) -> tuple[int, int]:
    """Shard labels sort by number ("2/16" before "10/16"); a label that is not a shard sorts last."""
    try:
        shard = parse_shard(label, "shard")
    except ValueError:
        return (1 << 30, 0)
    return (shard.index, shard.count)


def missing_shards(labels: Sequence[str]) -> list[str]:
    """The shards of a run that no merged report covers, from the shard labels the reports carry.

    Empty when the labels are not all of one count (nothing can be said) or when none are given.
    """
    shards = []
    for label in labels:
        try:
            shards.append(parse_shard(label, "shard"))
        except ValueError:
            return []
    counts = {shard.count for shard in shards}
    if len(counts) != 1:
        return []
    (count,) = counts
    present = {shard.index for shard in shards}
    return [f"{index}/{count}" for index in range(1, count + 1) if index not in present]
