"""The text of a standalone reproducer: a header that says what it shows and what it prints, the model's tiny config
and prompts inlined, the smallest call that meets the failure, and a last ``REPRO-RESULT {...}`` line for machines.

Exit status 1 while the recorded failure happens (the same kind, type and file; the line may drift between
releases), 0 once nothing fails, 2 for anything else, so a script doubles as a regression test. The text imports
torch, transformers and the standard library only. No torch import here: the values arrive as plain data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from string import Template
from typing import Any

from pytest_fullgraph.repro.plan import TEMPLATES, Expected
from pytest_fullgraph.repro.project import loader, module_names, needs
from pytest_fullgraph.repro.snippets import (
    BODIES,
    CATCH,
    COMPILE_TEMPLATES,
    EXPLAIN,
    FLOAT64,
    FLOAT64_EXPERTS,
    FORWARD,
    GENERATE,
    GENERATE_TEMPLATES,
    HELPER_BLOCKS,
    NO_NOISE,
    NOISE,
    PREFILL_AND_DECODE,
    PREFILL_ONLY,
    STATIC,
    TAIL,
)

WIDTH = 118


@dataclass(frozen=True)
class Script:
    """Everything a reproducer's text holds, as plain values."""

    template: str
    expected: Expected
    check_ids: tuple[str, ...]
    model_class: str
    config_class: str
    config: dict[str, Any]
    input_ids: list[list[int]]
    attention_mask: list[list[int]]
    generation: dict[str, Any] = field(default_factory=dict)
    eos_token_id: int | None = None
    pad_token_id: int = 0
    weights_seed: int = 0
    seed: int = 0
    dtype: str = "float32"
    cache_len: int = 0
    decode_step: bool = True
    #: the generate call of ``eager_error`` uses a static cache
    static: bool = False
    #: a cache divergence judged against float64 (False: float64 cannot run the model, rounding steps alone)
    float64: bool = True
    position_ids: bool = True
    backend: str = "aot_eager"
    versions: str = ""
    reduced: tuple[str, ...] = ()
    #: the classes transformers does not export, by name, with the file the script imports each from
    project: dict[str, str] = field(default_factory=dict)
    #: a file of ``project`` imports pytest_fullgraph (to register its model): those imports get a stand-in
    stand_in: bool = False

    def spelled(self, name: str) -> str:
        """How the script names a class: transformers' by its name, a project's through its file's module."""
        return f"{module_names(self.project)[self.project[name]]}.{name}" if name in self.project else name


def render(script: Script) -> str:
    """The reproducer's text."""
    helpers = HELPER_BLOCKS[script.template]
    if script.template == "cache_divergence":  # the recompute helper numbers positions where the forward takes them
        helpers = tuple(Template(block).safe_substitute(positions=script.position_ids) for block in helpers)
    if script.project:
        helpers = (*helpers, loader(script.stand_in))
    return "\n".join([*_header(script), *_imports(script), "", *_constants(script), "", *helpers, *_main(script),
                      TAIL]).rstrip("\n") + "\n"


def _header(script: Script) -> list[str]:
    others = len(script.check_ids) - 1
    also = f" (+{others} check{'s' * (others > 1)} failing alike)" if others else ""
    runs = TEMPLATES[script.template]
    if script.template == "forward_compile":
        runs += ": a prefill, then a decode step" if script.decode_step else ": a prefill"
    needed = needs(script.project, script.stand_in)
    lines = [f"Reproducer of {script.check_ids[0]}{also}, by `python -m pytest_fullgraph repro`; {needed}. "
             f"{script.versions}.",
             f'Runs {runs}. Exit 1, "BUG: ...", while it fails so ({script.expected.describe()}); exit 0, "FIXED: '
             '...", once not; exit 2, "OTHER: ...", on another failure.',
             f"Reduced from the suite's tiny config: {', '.join(script.reduced) or 'nothing'}."]
    return [f"# {line}" for text in lines for line in _wrapped(text, WIDTH - 2)]


def _imports(script: Script) -> list[str]:
    names = {script.model_class, script.config_class} - set(script.project)
    if script.template in GENERATE_TEMPLATES:
        names.add("GenerationConfig")
    if script.template == "forward_compile":
        names.add("StaticCache")
    if script.template in ("compiled_generate", "not_compiled", "forward_mismatch"):
        names.add("CompileConfig")
    lines = ["import json, re, sys, traceback" if script.template in COMPILE_TEMPLATES else
             "import copy, json, math, sys, traceback" if script.template == "cache_divergence" else
             "import json, sys, traceback", "import torch"]
    if script.project:
        lines.insert(1, "import importlib.util, types" if script.stand_in else "import importlib.util")
    if script.template in COMPILE_TEMPLATES:
        lines.append("from torch._dynamo import exc")
    lines.append(f"from transformers import {', '.join(sorted(names))}")
    if script.template == "helper_mismatch":
        lines.append("from transformers.integrations.executorch import (TorchExportableModuleForDecoderOnlyLM,\n"
                     "                                                  TorchExportableModuleWithStaticCache)")
    return lines


def _constants(script: Script) -> list[str]:
    lines = assignment("EXPECTED", script.expected.as_found()) + assignment("CONFIG", script.config)
    if script.template in GENERATE_TEMPLATES:
        lines += assignment("GENERATION", script.generation)
    return lines


def _main(script: Script) -> list[str]:
    model = f"{script.spelled(script.model_class)}({script.spelled(script.config_class)}(**CONFIG))"
    if script.dtype != "float32":
        model += f".to(torch.{script.dtype})"
    modules = module_names(script.project)
    lines = ["def main():", *(f"    {name} = project_module({path!r})" for path, name in modules.items()),
             f"    torch.manual_seed({script.weights_seed})  # the suite's weights", f"    model = {model}.eval()"]
    if script.template in GENERATE_TEMPLATES:
        lines.append("    model.generation_config.eos_token_id, model.generation_config.pad_token_id = "
                     f"{script.eos_token_id}, {script.pad_token_id}")
    ones = all(all(row) for row in script.attention_mask)
    mask = "torch.ones_like(input_ids)" if ones else f"torch.tensor({script.attention_mask})"
    lines += [f"    input_ids = torch.tensor({script.input_ids})", f"    inputs = dict(input_ids=input_ids, "
              f"attention_mask={mask})" if len(mask) < 60 else f"    inputs = dict(input_ids=input_ids,\n"
              f"                  attention_mask={mask})"]
    # only the forward template can ask dynamo where it would break instead (its prefill is a call of the model)
    located = script.template == "forward_compile" and script.expected.kind == "crash" and script.expected.where
    explain = Template(EXPLAIN).substitute(cache_len=script.cache_len) if located else ""
    catch = Template(CATCH).substitute(explain=explain)
    if script.template == "forward_compile":
        return [*lines, _forward_body(script, catch)]
    if script.template not in ("generate_break", "helper_mismatch"):  # greedy alone: no seed to set
        lines.append(Template(GENERATE).substitute(seed=script.seed).rstrip("\n"))
    body = Template(BODIES[script.template].replace(CATCH, catch)).substitute(
        seed=script.seed, extra=STATIC if script.static else "", backend_name=script.backend,
        path_text="the static cache" if script.static else "the default cache",
        float64=("" if not script.float64 else FLOAT64_EXPERTS if any("expert" in key for key in script.config)
                 else FLOAT64),
        noise=NOISE if script.float64 else NO_NOISE,
        inductor="\n    torch._inductor.config.fallback_random = True" if script.backend == "inductor" else "")
    return [*lines, body]


def _forward_body(script: Script, catch: str) -> str:
    """The forward compiled alone: a prefill on a static cache sized as generate sizes it, then (unless reduced
    away) one decode step, with position ids where the forward takes them, numbered as generate numbers them."""
    calls = Template(PREFILL_AND_DECODE if script.decode_step else PREFILL_ONLY).substitute(
        cache_len=script.cache_len,
        decode_position=' position_ids=prefill["position_ids"][:, -1:] + 1,' if script.position_ids else "")
    positions = 'position_ids=(inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0), ' if script.position_ids else ""
    return Template(FORWARD).substitute(positions=positions, calls=calls, catch=catch)


def assignment(name: str, value: Any, width: int = WIDTH) -> list[str]:
    """``NAME = <literal>`` as Python source, broken between items (never inside one) to stay within ``width``."""
    lines = [f"{name} = "]
    for atom in _atoms(value):
        glue = "" if lines[-1].endswith(("{", "[", "= ")) else " "
        if len(lines[-1]) + len(glue) + len(atom) > width and not lines[-1].endswith(("{", "[", "= ")):
            lines.append("    " + atom)
        else:
            lines[-1] += glue + atom
    return lines


def _atoms(value: Any) -> list[str]:
    """A literal's pieces between which a line may break: its items, with their keys and separators attached."""
    if isinstance(value, list) and len(value) > 3 and all(item == value[0] for item in value):
        return [f"[{value[0]!r}] * {len(value)}"]  # a per-layer list of one kind
    if not isinstance(value, dict | list) or not value or len(repr(value)) <= 40:
        return [repr(value)]
    items = list(value.items()) if isinstance(value, dict) else [(None, item) for item in value]
    atoms = ["{" if isinstance(value, dict) else "["]
    for index, (key, item) in enumerate(items):
        inner = _atoms(item)
        inner[0] = f"{key!r}: {inner[0]}" if isinstance(value, dict) else inner[0]
        inner[-1] += "," if index < len(items) - 1 else ""
        atoms += inner
    atoms[-1] += "}" if isinstance(value, dict) else "]"
    return atoms


def _wrapped(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def parse_result(output: str) -> dict[str, Any] | None:
    """The ``REPRO-RESULT`` of a script's output (its last such line), or None when it printed none."""
    for line in reversed(output.splitlines()):
        if line.startswith("REPRO-RESULT "):
            try:
                found = json.loads(line.removeprefix("REPRO-RESULT "))
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None
