"""The pieces of a reproducer's text, as Python source: the helper functions a script defines (where a failure is,
what it found, how it exits), the body of ``main`` for each template, and the forward template's calls. ``source``
fills them in with a check's values. Kept apart because they are text to read as the script reads, not logic.
"""

from __future__ import annotations

from pytest_fullgraph.repro.plan import TEMPLATES

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
#: The script's last lines: ``main`` run, anything but the recorded failure reported as ``OTHER``.
TAIL = '''try:
    main()
except Exception as error:  # not the failure this script is about: show it, exit 2
    traceback.print_exc()
    finish({"kind": "unexpected", "type": type(error).__name__}, f"an unexpected {type(error).__name__} (above)")
'''
#: Where a template's call fails: the failure found, told apart from the recorded one (``$explain`` may locate it).
CATCH = '''        except Exception as error:
            found = found_in(error)
$explain            finish(found, f"{found['type']} at {found.get('where', '?')}: {str(error).partition(chr(10))[0]}")
'''
#: ``main``'s seeded ``generate`` with the scenario's settings, for the templates that call it.
GENERATE = '''    def generate(**settings):  # seeded, as the suite runs it
        torch.manual_seed($seed)
        return model.generate(**inputs, generation_config=GenerationConfig(**GENERATION, **settings))
'''
#: A static cache without transformers' own compile: the eager run that a compiled one is compared with.
STATIC = 'cache_implementation="static", disable_compile=True'
_COMPILED = 'cache_implementation="static", compile_config=compile_config'
_COMPILE_CONFIG = '''    compile_config = CompileConfig(fullgraph=True, backend=$backend, mode=None)
    compile_config._compile_all_devices = True  # else transformers compiles on accelerators only
'''
#: The rest of ``main`` per template: the call that meets the failure, and what ``finish`` says.
BODIES = {
    "static_error": f'''    with torch.no_grad():
        generate()  # the default cache works
        try:
            generate({STATIC})
{CATCH}    finish(None, "model.generate works with a static cache too")
''',
    "eager_error": f'''    with torch.no_grad():
        try:
            generate($extra)
{CATCH}    finish(None, "model.generate works")
''',
    "generate_break": f'''    compiled = torch.compile(model.generate, fullgraph=True, backend="eager")
    with torch.no_grad():
        try:
            torch.manual_seed($seed)
            compiled(**inputs, generation_config=GenerationConfig(**GENERATION))
{CATCH}    finish(None, "torch.compile(model.generate, fullgraph=True) compiled and ran")
''',
    "compiled_generate": f'''{_COMPILE_CONFIG.replace("$backend", '"eager"')}    with torch.no_grad():
        try:
            generate({_COMPILED})
{CATCH}    finish(None, "generate compiled its forward with fullgraph=True and ran")
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
        eager = generate({STATIC})
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
        static = GenerationConfig(**GENERATION, {STATIC})
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
_RECOMPUTE = '''def recompute(model, tokens, mask, width):  # next-token logits with no cache, as generate feeds them
    mask = torch.cat([mask, mask.new_ones(mask.shape[0], width - mask.shape[1])], -1)
    positions = dict(position_ids=(mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)) if $positions else {}
    return model(input_ids=tokens[:, :width], attention_mask=mask, use_cache=False, **positions).logits[:, -1].double()
'''
#: How a cache-divergence script measures its dtype's distance from float64 at a step, or says it cannot (reformer).
_IN_LOOP = " " * 12
NOISE = (f'{_IN_LOOP}exact, own = (recompute(m, cached.sequences, inputs["attention_mask"], width) '
         'for m in (reference, model))\n'
         f'{_IN_LOOP}noise = (own - exact)[rows].abs().max().item() if (rows := exact.isfinite().all(-1)).any() '
         'else None\n')
NO_NOISE = '''            noise = None  # float64 cannot run this model: the tolerance is rounding steps alone
'''
#: How a cache-divergence script makes its float64 model: a model with experts takes the eager experts first.
FLOAT64 = '''    reference = copy.deepcopy(model).double()  # float64: what each step's logits are measured against
'''
FLOAT64_EXPERTS = '''    reference = copy.deepcopy(model)  # float64: what each step's logits are measured against
    reference.set_experts_implementation("eager")  # grouped_mm, the experts' default, has no float64 kernel
    reference = reference.double()
'''
_CACHE_DIVERGENCE = '''$float64    with torch.no_grad():
        cached = generate(output_logits=True, return_dict_in_generate=True, $extra)
        recomputed = generate(output_logits=True, return_dict_in_generate=True, use_cache=False)  # the reference
        for step, (logits, truth) in enumerate(zip(cached.logits, recomputed.logits)):
            width = input_ids.shape[1] + step
$noise            ulp = torch.finfo(model.dtype).eps * 2.0 ** math.floor(math.log2(truth.abs().max().item()))
            allowed, off = 1024 * ulp if noise is None else max(64 * noise, 64 * ulp), (logits - truth).abs().max()
            if off > allowed:
                finish({"kind": "mismatch"}, f"$path_text is off at step {step}: its logits are {off:.3g} off "
                       f"recompute's, where {model.dtype} is {noise} off float64 (tolerance {allowed:.3g})")
            if not torch.equal(cached.sequences[:, width], recomputed.sequences[:, width]):
                break  # the next steps' prefixes differ: their logits cannot be compared
    finish(None, "$path_text: every step's logits within rounding of recompute's")
'''
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
HELPER_BLOCKS = {"static_error": _RAISES, "eager_error": _RAISES, "not_compiled": _RAISES,
                 "generate_break": _BREAKS, "forward_compile": _BREAKS, "compiled_generate": _BREAKS,
                 "forward_mismatch": (_FINISH,), "helper_mismatch": (_FINISH, _POSITIONS),
                 "cache_divergence": (_FINISH, _RECOMPUTE)}
BODIES["cache_divergence"] = _CACHE_DIVERGENCE
#: The ``forward_compile`` template's body: the forward compiled alone, its ``$calls`` below.
FORWARD = '''    forward = torch.compile(model, fullgraph=True, backend="eager")
    prefill = dict(inputs, ${positions}use_cache=True)
    with torch.no_grad():
        try:
$calls$catch    finish(None, "the forward compiled with fullgraph=True and ran")
'''
#: The forward's calls: a prefill alone (a decode step reduced away), or a prefill and one decode step.
PREFILL_ONLY = '''            forward(**prefill, cache=StaticCache(config=model.config, max_cache_len=$cache_len))
'''
PREFILL_AND_DECODE = '''            cache = StaticCache(config=model.config, max_cache_len=$cache_len)
            logits = forward(**prefill, cache=cache).logits
            step = dict(input_ids=logits[:, -1:].argmax(-1),$decode_position
                        attention_mask=torch.cat([inputs["attention_mask"], torch.ones_like(input_ids[:, :1])], -1))
            forward(**step, use_cache=True, cache=cache)  # one decode step
'''
#: A compiler crash of the forward: where dynamo breaks without ``fullgraph=True`` says where to look.
EXPLAIN = '''            if found["kind"] == "crash":  # where does dynamo break without fullgraph=True?
                cache = StaticCache(config=model.config, max_cache_len=$cache_len)
                reasons = torch._dynamo.explain(model)(**prefill, cache=cache).break_reasons
                found["where"] = where(reasons[0].user_stack) if reasons else "?"
'''
#: The templates that compile, whose scripts import ``re`` and dynamo's exceptions.
COMPILE_TEMPLATES = frozenset(name for name, blocks in HELPER_BLOCKS.items() if blocks is _BREAKS)
#: The templates that call ``generate`` (and so inline ``GENERATION`` and the model's generation defaults).
GENERATE_TEMPLATES = frozenset(TEMPLATES) - {"forward_compile"}
