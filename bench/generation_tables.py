"""The tables bench/generation.py prints as it measures, from rows alone (no torch): ``table(raw)`` renders a run's
raw output (bench/raw.py) as the lines its subcommand printed."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.1f}x" if ours and theirs else "-"


def exactness(rows: dict[str, dict[str, Any]]) -> str:
    """``exact`` when every variant that ran gave the default generate's tokens, else the ones that differ."""
    reference = rows["dynamic"].get("tokens_digest")
    if reference is None:
        return "- (generate failed)"
    differing = [variant for variant, row in rows.items() if row.get("tokens_digest") not in (None, reference)]
    return "exact" if not differing else "MISMATCH: " + ", ".join(differing)


def table(raw_output: dict[str, Any]) -> list[str]:
    """A results page's table of a run, from its raw output alone (no torch): the lines the subcommand printed."""
    settings = raw_output["settings"]
    header, line, keys = TABLES[settings["subcommand"]]
    return [*header(settings), *(line(rows, settings) for rows in _lines(raw_output["rows"], keys))]


def _lines(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[list[dict[str, Any]]]:
    """The rows of each line of a table, in order: consecutive rows alike in ``keys`` (no keys: one row a line)."""
    if not keys:
        return [[row] for row in rows]
    return [list(group) for _, group in itertools.groupby(rows, key=lambda row: tuple(row[key] for key in keys))]


def scaling_header(settings: dict[str, Any]) -> list[str]:
    return ["| loop | backend | new tokens | compile + first call (s) | steady ms/token | peak RSS (MiB) |",
            "|---|---|---|---|---|---|"]


def scaling_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    row = rows[0]
    return (f"| {settings['loop']} | {row['backend']} | {row['tokens']} | {row.get('first_call_s', row.get('error'))}"
            f" | {row.get('ms_per_token', '-')} | {row.get('peak_rss_mib', '-')} |")


def variants_header(settings: dict[str, Any]) -> list[str]:
    return [f"| variant | batch | new tokens | first call (s) | steady ms/token | backend {settings['backend']} |",
            "|---|---|---|---|---|---|"]


def variants_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    row = rows[0]
    return (f"| {row['variant']} | {row['batch']} | {row['tokens']} | {row.get('first_call_s', row.get('error'))} | "
            f"{row.get('ms_per_token', '-')} | |")


def cost_header(settings: dict[str, Any]) -> list[str]:
    tokens = settings["tokens"]
    columns = " | ".join(f"{count} tokens: first call (s) / peak RSS (MiB)" for count in tokens)
    return [f"| model | {columns} | time ratio {tokens[-1]}/{tokens[0]} | RSS ratio |",
            "|---|" + "---|" * (len(tokens) + 2)]


def cost_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """One model's cells in the order of its token counts, and the last against the first (none if one failed)."""
    cells = [f"{row['first_call_s']} / {row['peak_rss_mib']}" if "error" not in row else f"error: {row['error']}"
             for row in rows]
    ratios = ["-", "-"]
    if all("error" not in row for row in rows):
        ratios = [f"{rows[-1]['first_call_s'] / rows[0]['first_call_s']:.2f}",
                  f"{rows[-1]['peak_rss_mib'] / rows[0]['peak_rss_mib']:.2f}"]
    return f"| {rows[0]['model']} | {' | '.join(cells)} | {' | '.join(ratios)} |"


def _several_shapes(settings: dict[str, Any]) -> bool:
    """A throughput run over several (batch, tokens) is one table whose rows say their shape."""
    return len(settings["batch"]) * len(settings["tokens"]) > 1


def caption(settings: dict[str, Any]) -> str:
    """The line above a throughput table: its shapes, dtype, size and decoding, and what its columns mean."""
    mode = "assisted by the suite's draft model" if settings["assisted"] else f"num_beams {settings['beams']}"
    batches, tokens = (" / ".join(str(value) for value in settings[key]) for key in ("batch", "tokens"))
    return (f"\nbatch {batches}, {tokens} new tokens, {settings['dtype']}, {settings['size']} model, {mode}; "
            "tokens/s = batch x tokens / steady seconds of one generation; exact: every variant's tokens equal the "
            "default generate's")


def throughput_header(settings: dict[str, Any]) -> list[str]:
    loops, baselines = settings["loops"], settings["baselines"]
    ratios = [f"{loop} / {base}" for loop in loops for base in baselines]
    shape = "batch | new tokens | " if _several_shapes(settings) else ""
    return [f"| {shape}model | " + " | ".join(f"{variant} tok/s" for variant in [*loops, *baselines]) + " | "
            + " | ".join(ratios) + " | exact |",
            "|---|" + "---|" * (len(loops) + len(baselines) + len(ratios) + 1 + 2 * _several_shapes(settings))]


def throughput_line(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """One model at one shape: tokens/s per variant (or its error), loops against baselines, exactness."""
    by_variant = {row["variant"]: row for row in rows}
    batch, tokens, model = rows[0]["batch"], rows[0]["tokens"], rows[0]["model"]
    rates = {variant: batch * 1000 / row["ms_per_token"] if row.get("ms_per_token") else None
             for variant, row in by_variant.items()}
    cells = [f"{rates[variant]:.0f}" if rates[variant] else f"error: {by_variant[variant].get('error')}"
             for variant in by_variant]
    quotients = [_ratio(rates[loop], rates[base]) for loop in settings["loops"] for base in settings["baselines"]]
    shape = f"{batch} | {tokens} | " if _several_shapes(settings) else ""
    return f"| {shape}{model} | {' | '.join(cells)} | {' | '.join(quotients)} | {exactness(by_variant)} |"


#: Per subcommand: its table's header, the line of each group of rows, and the row keys a group shares.
TABLES: dict[str, tuple[Callable[[dict[str, Any]], list[str]], Callable[[list[dict[str, Any]], dict[str, Any]], str],
                        tuple[str, ...]]] = {
    "scaling": (scaling_header, scaling_line, ()),
    "table": (variants_header, variants_line, ()),
    "cost": (cost_header, cost_line, ("model",)),
    "throughput": (throughput_header, throughput_line, ("batch", "tokens", "model")),
}

