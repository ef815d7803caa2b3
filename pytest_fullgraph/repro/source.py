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

WIDTH = 118

_HELPERS = '''def where(stack):  # the innermost frame outside torch, relative to site-packages, as the report shows it
    frames = [f for f in stack if not f.filename.split("site-packages/")[-1].startswith("torch/")] or list(stack)
    return f"{frames[-1].filename.split('site-packages/')[-1]}:{frames[-1].lineno}" if frames else "?"
'''
_ERROR_ONLY = '''def found_in(error):  # the exception's type and where it was raised
    return {"kind": "error", "type": type(error).__name__, "where": where(traceback.extract_tb(error.__traceback__))}
'''
_COMPILE_ERRORS = '''def found_in(error):  # a graph break (what fullgraph=True raises for one) or a compiler crash
    if isinstance(error, (exc.Unsupported, exc.UserError, exc.UncapturedHigherOrderOpError)):
        stack = getattr(error, "real_stack", None) or traceback.extract_tb(error.__traceback__)
        return {"kind": "break", "type": getattr(error, "gb_type", None) or type(error).__name__, "where": where(stack)}
    inner = re.match(r"(\\w+): ", str(error))  # dynamo's wrapper names the exception it wraps first
    return {"kind": "crash", "type": type(error).__name__ + (f": {inner[1]}" if inner else "")}
'''
_FINISH = '''def finish(found, text):  # exit 1: the recorded failure (same kind, type, file); 0: none (fixed); 2: other
    same = found is not None and all(found.get(key) == EXPECTED[key] for key in EXPECTED if key != "where") and (
        f"/{found.get('where', '')}".rpartition(":")[0].endswith(f"/{EXPECTED.get('where', '')}".rpartition(":")[0]))
    status = "bug" if same else "fixed" if found is None else "other"
    print(f"{status.upper()}: {text}\\nREPRO-RESULT {json.dumps({'status': status, **(found or {})})}")
    sys.exit({"bug": 1, "fixed": 0}.get(status, 2))
'''
_TAIL = '''try:
    main()
except Exception as error:  # not the failure this script is about: show it, exit 2
    traceback.print_exc()
    finish({"kind": "unexpected", "type": type(error).__name__}, f"an unexpected {type(error).__name__} (above)")
'''
_CATCH = '''        except Exception as error:
            found = found_in(error)
$explain            finish(found, f"{found['type']} at {found.get('where', '?')}: {str(error).partition(chr(10))[0]}")
'''
_GENERATE = '''    def generate(**settings):  # seeded, as the suite runs it
        torch.manual_seed($seed)
        return model.generate(**inputs, generation_config=GenerationConfig(**GENERATION, **settings))
'''
_STATIC = 'cache_implementation="static", disable_compile=True'
_COMPILED = 'cache_implementation="static", compile_config=compile_config'
_COMPILE_CONFIG = '''    compile_config = CompileConfig(fullgraph=True, backend=$backend, mode=None)
    compile_config._compile_all_devices = True  # else transformers compiles on accelerators only
'''
_BODIES = {
    "static_error": f'''    with torch.no_grad():
        generate()  # the default cache works
        try:
            generate({_STATIC})
{_CATCH}    finish(None, "model.generate works with a static cache too")
''',
    "eager_error": f'''    with torch.no_grad():
        try:
            generate($extra)
{_CATCH}    finish(None, "model.generate works")
''',
    "generate_break": f'''    compiled = torch.compile(model.generate, fullgraph=True, backend="eager")
    with torch.no_grad():
        try:
            torch.manual_seed($seed)
            compiled(**inputs, generation_config=GenerationConfig(**GENERATION))
{_CATCH}    finish(None, "torch.compile(model.generate, fullgraph=True) compiled and ran")
''',
    "compiled_generate": f'''{_COMPILE_CONFIG.replace("$backend", '"eager"')}    with torch.no_grad():
        try:
            generate({_COMPILED})
{_CATCH}    finish(None, "generate compiled its forward with fullgraph=True and ran")
''',
    "not_compiled": f'''    graphs = []  # what the backend below is given: the graphs compiled
{_COMPILE_CONFIG.replace("$backend", "lambda graph, _: graphs.append(graph) or graph")}    with torch.no_grad():
        generate({_COMPILED})
    if graphs:
        finish(None, f"generate compiled {{len(graphs)}} graph(s)")
    finish({{"kind": "not_compiled"}}, f"generate with a static cache and a CompileConfig compiled nothing "
           f"({{type(model).__name__}}._can_compile_fullgraph = {{model._can_compile_fullgraph}}, "
           f"use_cache = {{model.generation_config.use_cache}})")
''',
    "forward_mismatch": f'''{_COMPILE_CONFIG.replace("$backend", '"$backend_name"')}\
    torch.set_num_threads(1)$inductor
    with torch.no_grad():
        eager = generate({_STATIC})
        compiled = generate({_COMPILED})
    if torch.equal(eager, compiled):
        finish(None, "compiled tokens equal eager tokens")
    width = min(eager.shape[1], compiled.shape[1])
    row, position = min(((r, p) for r, p in (eager[:, :width] != compiled[:, :width]).nonzero().tolist()),
                        key=lambda found: found[::-1], default=(0, width))
    tokens = [tokens[row, position:position + 1].tolist() for tokens in (eager, compiled)]
    finish({{"kind": "mismatch"}}, f"compiled tokens differ from eager at row {{row}}, position {{position}}: "
           f"eager {{tokens[0]}}, compiled {{tokens[1]}}")
''',
    "helper_mismatch": f'''    new = GENERATION["max_new_tokens"]
    with torch.no_grad():
        static = GenerationConfig(**GENERATION, {_STATIC})
        expected = model.generate(**inputs, generation_config=static)
        model.generation_config.cache_implementation = "static"  # the exportable module takes the model's cache
        module = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=input_ids.shape[1] + new)
        program = module.export(input_ids=input_ids[:1, :1], cache_position=torch.zeros(1, dtype=torch.long))
        helper = torch.cat([TorchExportableModuleWithStaticCache.generate(program, r[None], new) for r in input_ids])
        driven = torch.cat([positions_loop(program.module(), row[None], new) for row in input_ids])
    if torch.equal(expected, helper):
        finish(None, "the helper's tokens equal model.generate's")
    row, position = min(((r, p) for r, p in (expected != helper).nonzero().tolist()), key=lambda found: found[::-1])
    whose = ("the same program fed positions P, P+1, ... gives generate's tokens: the helper's loop is at fault"
             if torch.equal(driven, expected) else "fed the right positions, the program itself differs too")
    finish({{"kind": "mismatch"}}, f"the helper's tokens differ from generate's at row {{row}}, position {{position}}: "
           f"generate {{expected[row, position].item()}}, helper {{helper[row, position].item()}}; {{whose}}")
''',
}
_POSITIONS = '''def positions_loop(module, row, new_tokens):  # the exported forward fed each token at its own position
    tokens = list(row[0])
    for position in range(row.shape[1] + new_tokens - 1):
        logits = module(input_ids=tokens[position].reshape(1, 1), cache_position=torch.tensor([position]))
        tokens += [logits[0, -1].argmax()] if position >= row.shape[1] - 1 else []
    return torch.stack(tokens)[None]
'''
_RAISES = (_HELPERS, _ERROR_ONLY, _FINISH)
_BREAKS = (_HELPERS, _COMPILE_ERRORS, _FINISH)
#: The helper functions each template's script defines, in order. Those that compare tokens catch no exception,
#: so they need no ``found_in``; the compiling ones tell a graph break from a compiler crash.
_HELPER_BLOCKS = {"static_error": _RAISES, "eager_error": _RAISES, "not_compiled": _RAISES,
                  "generate_break": _BREAKS, "forward_compile": _BREAKS, "compiled_generate": _BREAKS,
                  "forward_mismatch": (_FINISH,), "helper_mismatch": (_FINISH, _POSITIONS)}
_FORWARD = '''    forward = torch.compile(model, fullgraph=True, backend="eager")
    prefill = dict(inputs, ${positions}use_cache=True)
    with torch.no_grad():
        try:
$calls$catch    finish(None, "the forward compiled with fullgraph=True and ran")
'''
_PREFILL_ONLY = '''            forward(**prefill, cache=StaticCache(config=model.config, max_cache_len=$cache_len))
'''
_PREFILL_AND_DECODE = '''            cache = StaticCache(config=model.config, max_cache_len=$cache_len)
            logits = forward(**prefill, cache=cache).logits
            step = dict(input_ids=logits[:, -1:].argmax(-1),$decode_position
                        attention_mask=torch.cat([inputs["attention_mask"], torch.ones_like(input_ids[:, :1])], -1))
            forward(**step, use_cache=True, cache=cache)  # one decode step
'''
_EXPLAIN = '''            if found["kind"] == "crash":  # where does dynamo break without fullgraph=True?
                cache = StaticCache(config=model.config, max_cache_len=$cache_len)
                reasons = torch._dynamo.explain(model)(**prefill, cache=cache).break_reasons
                found["where"] = where(reasons[0].user_stack) if reasons else "?"
'''
_COMPILE_TEMPLATES = frozenset(name for name, blocks in _HELPER_BLOCKS.items() if blocks is _BREAKS)
#: The templates that call ``generate`` (and so inline ``GENERATION`` and the model's generation defaults).
GENERATE_TEMPLATES = frozenset(TEMPLATES) - {"forward_compile"}


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
    helpers = _HELPER_BLOCKS[script.template]
    if script.project:
        helpers = (*helpers, loader(script.stand_in))
    return "\n".join([*_header(script), *_imports(script), "", *_constants(script), "", *helpers, *_main(script),
                      _TAIL]).rstrip("\n") + "\n"


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
    lines = ["import json, re, sys, traceback" if script.template in _COMPILE_TEMPLATES else
             "import json, sys, traceback", "import torch"]
    if script.project:
        lines.insert(1, "import importlib.util, types" if script.stand_in else "import importlib.util")
    if script.template in _COMPILE_TEMPLATES:
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
    explain = Template(_EXPLAIN).substitute(cache_len=script.cache_len) if located else ""
    catch = Template(_CATCH).substitute(explain=explain)
    if script.template == "forward_compile":
        return [*lines, _forward_body(script, catch)]
    if script.template not in ("generate_break", "helper_mismatch"):  # greedy alone: no seed to set
        lines.append(Template(_GENERATE).substitute(seed=script.seed).rstrip("\n"))
    body = Template(_BODIES[script.template].replace(_CATCH, catch)).substitute(
        seed=script.seed, extra=_STATIC if script.static else "", backend_name=script.backend,
        inductor="\n    torch._inductor.config.fallback_random = True" if script.backend == "inductor" else "")
    return [*lines, body]


def _forward_body(script: Script, catch: str) -> str:
    """The forward compiled alone: a prefill on a static cache sized as generate sizes it, then (unless reduced
    away) one decode step, with position ids where the forward takes them, numbered as generate numbers them."""
    calls = Template(_PREFILL_AND_DECODE if script.decode_step else _PREFILL_ONLY).substitute(
        cache_len=script.cache_len,
        decode_position=' position_ids=prefill["position_ids"][:, -1:] + 1,' if script.position_ids else "")
    positions = 'position_ids=(inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0), ' if script.position_ids else ""
    return Template(_FORWARD).substitute(positions=positions, calls=calls, catch=catch)


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
