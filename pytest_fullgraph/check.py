"""One check = (model, scenario, level): eager reference, compiled run, exact comparison → ``CheckResult``."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from pytest_fullgraph import breaks, tiny_configs

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel

OUTCOMES = ("pass", "mismatch", "break", "error", "nondeterministic")
#: Threads used while a check runs: reductions are then reproducible run to run.
CHECK_THREADS = 1


@dataclass(frozen=True)
class Scenario:
    """Inputs and generation settings of a check; every value is fixed so runs are reproducible."""

    name: str
    description: str
    prompt_lengths: tuple[int, ...] = (8, 8)
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    uses_eos: bool = False
    seed: int = 1234


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("greedy", "greedy decoding, batch 2, no EOS"),
        Scenario("sample", "do_sample with temperature 0.7, top-k 20, top-p 0.9 and a fixed seed",
                 do_sample=True, temperature=0.7, top_k=20, top_p=0.9),
        Scenario("eos", "greedy with an EOS id the model emits mid-generation; finished rows are padded",
                 uses_eos=True),
        Scenario("padded", "left-padded batch of prompts of lengths 8 and 5 with an attention mask",
                 prompt_lengths=(8, 5)),
    )
}


@dataclass
class Mismatch:
    """Where compiled tokens first differ from eager ones, and how close eager's choice was there."""

    row: int
    position: int
    step: int
    eager_token: int | None
    compiled_token: int | None
    eager_logit_gap: float | None = None
    eager_shape: list[int] = field(default_factory=list)
    compiled_shape: list[int] = field(default_factory=list)

    def describe(self, other: str = "compiled") -> str:
        """``other`` names what was compared with eager: the compiled run, or our loop run eagerly."""
        gap = "unknown" if self.eager_logit_gap is None else f"{self.eager_logit_gap:.4g}"
        text = (f"row {self.row}, position {self.position} (new token {self.step}): eager {self.eager_token}, "
                f"{other} {self.compiled_token}; eager top-1/top-2 logit gap there {gap}")
        if self.eager_shape != self.compiled_shape:
            text += f"; shapes eager {tuple(self.eager_shape)} vs {other} {tuple(self.compiled_shape)}"
        return text


@dataclass
class CheckResult:
    """The outcome of one check, in JSON builtins so xdist and report files can carry it."""

    model: str
    scenario: str
    level: str
    backend: str
    max_new_tokens: int
    outcome: str
    message: str = ""
    first_break: breaks.BreakRecord | None = None
    breaks: list[breaks.BreakRecord] = field(default_factory=list)
    graph_count: int | None = None
    graph_ops: list[int] = field(default_factory=list)
    recompiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    mismatch: Mismatch | None = None
    eos_token_id: int | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def check_id(self) -> str:
        return f"{self.model}-{self.scenario}-{self.level}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        fields = dict(data)
        if fields.get("first_break"):
            fields["first_break"] = breaks.BreakRecord.from_dict(fields["first_break"])
        fields["breaks"] = [breaks.BreakRecord.from_dict(b) for b in fields.get("breaks", [])]
        if fields.get("mismatch"):
            fields["mismatch"] = Mismatch(**fields["mismatch"])
        return cls(**fields)


def generate_fn(model: PreTrainedModel) -> Callable[..., torch.Tensor]:
    """``model.generate`` typed as it behaves (transformers' stubs make it ``Tensor | Module``)."""
    return cast("Callable[..., torch.Tensor]", cast(Any, model).generate)


# --- levels -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """A way of compiling generation: how its eager reference and its compiled run are made."""

    name: str
    description: str
    #: generation config of the eager reference, derived from the scenario's
    reference_config: Callable[[GenerationConfig], GenerationConfig]
    #: runs generation compiled; ``fullgraph=False`` is the diagnostic pass that collects every break
    run_compiled: Callable[[PreTrainedModel, dict[str, Any], GenerationConfig, Any, bool], torch.Tensor]
    #: our own loop run eagerly, which must equal the eager reference before compiled output is judged
    eager_variant: Callable[[PreTrainedModel, dict[str, Any], GenerationConfig], torch.Tensor] | None = None
    #: True: the compiled run must be exactly one graph; None: graphs are not counted (export)
    single_graph: bool | None = False


def _static_cache(config: GenerationConfig) -> GenerationConfig:
    config = copy.deepcopy(config)
    config.cache_implementation = "static"
    config.disable_compile = True  # the reference is eager; transformers would auto-compile a static cache
    return config


def _run_forward_level(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                       backend: Any, fullgraph: bool) -> torch.Tensor:
    from transformers import CompileConfig

    compile_config = CompileConfig(fullgraph=fullgraph, backend=backend, mode=cast(str, None))
    compile_config._compile_all_devices = cast(None, True)  # transformers compiles only on accelerators otherwise
    config = copy.deepcopy(config)
    config.disable_compile = False
    config.compile_config = compile_config
    return generate_fn(model)(**inputs, generation_config=config)


def _run_generate_level(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                        backend: Any, fullgraph: bool) -> torch.Tensor:
    import torch

    compiled_generate = torch.compile(generate_fn(model), fullgraph=fullgraph, backend=backend)
    return compiled_generate(**inputs, generation_config=config)


def _run_decode_eagerly(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig) -> torch.Tensor:
    from pytest_fullgraph.decode import fullgraph_generate

    return fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config)


def _run_decode_level(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                      backend: Any, fullgraph: bool) -> torch.Tensor:
    import torch

    from pytest_fullgraph.decode import fullgraph_generate

    def compiler(loop: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(loop, fullgraph=fullgraph, backend=backend)

    return fullgraph_generate(model, inputs["input_ids"], inputs["attention_mask"], config, compiler=compiler)


def _run_export_level(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
                      backend: Any, fullgraph: bool) -> torch.Tensor:
    from pytest_fullgraph.decode import export_generate

    del backend  # torch.export makes an ExportedProgram; no torch.compile backend is involved
    program = export_generate(model, inputs["input_ids"], inputs["attention_mask"], config, strict=fullgraph)
    return program(inputs["input_ids"], inputs["attention_mask"])


LEVELS: dict[str, Level] = {
    level.name: level
    for level in (
        Level("forward", "transformers' supported path: static cache, forward compiled with fullgraph=True, "
              "driven by model.generate", _static_cache, _run_forward_level),
        Level("generate", "torch.compile(model.generate, fullgraph=True)", copy.deepcopy, _run_generate_level),
        Level("decode", "pytest_fullgraph.fullgraph_generate compiled with fullgraph=True: one graph",
              copy.deepcopy, _run_decode_level, _run_decode_eagerly, single_graph=True),
        Level("export", "torch.export.export of fullgraph_generate's loop, run as an ExportedProgram",
              copy.deepcopy, _run_export_level, _run_decode_eagerly, single_graph=None),
    )
}


def register_level(level: Level) -> None:
    """Add a level (used by the single-graph decode loop); names must be unique."""
    if level.name in LEVELS:
        raise ValueError(f"level {level.name!r} is already registered")
    LEVELS[level.name] = level


# --- inputs -------------------------------------------------------------------------------------------------


def vocab_size(model: PreTrainedModel) -> int:
    return int(model.config.get_text_config().vocab_size)


def make_inputs(model: PreTrainedModel, scenario: Scenario) -> dict[str, torch.Tensor]:
    """Seeded prompts of the scenario's lengths, left-padded, with an attention mask."""
    import torch

    generator = torch.Generator().manual_seed(scenario.seed)
    width = max(scenario.prompt_lengths)
    low = tiny_configs.FIRST_PROMPT_ID
    high = vocab_size(model)
    input_ids = torch.full((len(scenario.prompt_lengths), width), tiny_configs.PAD_TOKEN_ID, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(scenario.prompt_lengths):
        input_ids[row, width - length:] = torch.randint(low, high, (length,), generator=generator)
        attention_mask[row, width - length:] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def generation_config(scenario: Scenario, max_new_tokens: int, eos_token_id: int | None) -> GenerationConfig:
    from transformers import GenerationConfig

    sampling: dict[str, Any] = {}
    if scenario.do_sample:
        sampling = {"temperature": scenario.temperature, "top_k": scenario.top_k, "top_p": scenario.top_p}
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=scenario.do_sample,
                            eos_token_id=eos_token_id, pad_token_id=tiny_configs.PAD_TOKEN_ID, **sampling)


@contextlib.contextmanager
def model_generation_defaults(model: PreTrainedModel, eos_token_id: int | None) -> Iterator[None]:
    """Make the model's own generation defaults agree with the scenario.

    transformers fills an unset ``eos_token_id`` from ``model.generation_config``, so "no EOS" is only
    honoured when the model's default says so too.
    """
    defaults = model.generation_config
    saved = (defaults.eos_token_id, defaults.pad_token_id)
    defaults.eos_token_id = eos_token_id
    defaults.pad_token_id = tiny_configs.PAD_TOKEN_ID
    try:
        yield
    finally:
        defaults.eos_token_id, defaults.pad_token_id = saved


@contextlib.contextmanager
def reproducible_compute(backend: str) -> Iterator[None]:
    """Pin threads, and make inductor draw random numbers as eager does, so seeded runs are comparable."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(CHECK_THREADS)
    try:
        if backend == "inductor":
            import torch._inductor.config as inductor_config

            with inductor_config.patch(fallback_random=True):
                yield
        else:
            yield
    finally:
        torch.set_num_threads(threads)


def _seeded(seed: int, run: Callable[[], torch.Tensor]) -> torch.Tensor:
    import torch

    torch.manual_seed(seed)
    return run()


def pick_eos_token(greedy_tokens: torch.Tensor, prompt_width: int) -> int:
    """An EOS id the model emits mid-generation: row 0's first new token from step 2 on not seen before.

    Preferring a token the other rows never emit makes rows finish at different steps, so padding
    after EOS is exercised.
    """
    new_tokens = greedy_tokens[:, prompt_width:].tolist()
    first_row, other_rows = new_tokens[0], {t for row in new_tokens[1:] for t in row}
    candidates = [token for step, token in enumerate(first_row) if step >= 1 and token not in first_row[:step]]
    preferred = [token for token in candidates if token not in other_rows]
    if preferred or candidates:
        return int((preferred or candidates)[0])
    return int(first_row[min(1, len(first_row) - 1)])


# --- comparison ---------------------------------------------------------------------------------------------


def first_difference(eager: torch.Tensor, compiled: torch.Tensor, prompt_width: int) -> Mismatch:
    """The first (row, position) where two token tensors differ, shapes allowed to differ."""
    rows = min(eager.shape[0], compiled.shape[0])
    length = min(eager.shape[1], compiled.shape[1])
    for position in range(length):
        for row in range(rows):
            if int(eager[row, position]) != int(compiled[row, position]):
                return Mismatch(row, position, position - prompt_width, int(eager[row, position]),
                                int(compiled[row, position]), None, list(eager.shape), list(compiled.shape))
    longer = eager if eager.shape[1] > length else compiled
    token = int(longer[0, length]) if longer.shape[1] > length else None
    return Mismatch(0, length, length - prompt_width, token if longer is eager else None,
                    token if longer is compiled else None, None, list(eager.shape), list(compiled.shape))


def eager_logit_gap(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                    mismatch: Mismatch) -> float | None:
    """Top-1 minus top-2 logit of the eager step at the mismatch: tiny gaps mean a float-order flip."""
    config = copy.deepcopy(config)
    config.output_logits = True
    config.return_dict_in_generate = True
    output = _seeded(seed, lambda: generate_fn(model)(**inputs, generation_config=config))
    logits = getattr(output, "logits", None)
    if not logits or not 0 <= mismatch.step < len(logits):
        return None
    top = logits[mismatch.step][mismatch.row].float().topk(2).values
    return float(top[0] - top[1])


# --- the check ----------------------------------------------------------------------------------------------


def run_check(
    model: PreTrainedModel | BaseException,
    model_name: str,
    scenario_name: str,
    level_name: str,
    backend: str,
    max_new_tokens: int,
    *,
    diagnose: bool = True,
) -> CheckResult:
    """Run one check; never raises for a model's or compiler's failure: that becomes the outcome.

    ``diagnose``: when the fullgraph compile fails, run once more without fullgraph to record every break.
    """
    import torch

    result = CheckResult(model_name, scenario_name, level_name, backend, max_new_tokens, outcome="error")
    if isinstance(model, BaseException):
        result.message = f"model {model_name!r} failed to build: {type(model).__name__}: {model}"
        return result
    scenario, level = SCENARIOS[scenario_name], LEVELS[level_name]
    inputs = make_inputs(model, scenario)
    prompt_width = int(inputs["input_ids"].shape[1])
    with torch.no_grad(), reproducible_compute(backend):
        stage = "eager generation"
        try:
            eos = None
            if scenario.uses_eos:
                with model_generation_defaults(model, None):
                    greedy = generate_fn(model)(**inputs, generation_config=generation_config(
                        replace(scenario, uses_eos=False), max_new_tokens, None))
                eos = pick_eos_token(greedy, prompt_width)
            result.eos_token_id = eos
            config = level.reference_config(generation_config(scenario, max_new_tokens, eos))
            with model_generation_defaults(model, eos):
                started = time.perf_counter()
                eager = _seeded(scenario.seed, lambda: generate_fn(model)(**inputs, generation_config=config))
                result.timings["eager_s"] = time.perf_counter() - started
                again = _seeded(scenario.seed, lambda: generate_fn(model)(**inputs, generation_config=config))
                if not torch.equal(eager, again):
                    result.outcome = "nondeterministic"
                    result.mismatch = first_difference(eager, again, prompt_width)
                    result.message = f"eager generation differs from itself: {result.mismatch.describe()}"
                    return result
                if level.eager_variant is not None:
                    stage = "eager generation by our loop"
                    ours = _seeded(scenario.seed, lambda: level.eager_variant(model, inputs, config))  # type: ignore[misc]
                    if not torch.equal(eager, ours):
                        result.outcome = "mismatch"
                        result.mismatch = first_difference(eager, ours, prompt_width)
                        result.mismatch.eager_logit_gap = eager_logit_gap(model, inputs, config, scenario.seed,
                                                                          result.mismatch)
                        result.message = (f"fullgraph_generate run eagerly differs from model.generate at "
                                          f"{result.mismatch.describe('fullgraph_generate')}"
                                          f"{static_cache_verdict(model, inputs, config, scenario.seed, eager)}")
                        return result
                stage = "compiled generation"
                _compile_and_compare(result, model, inputs, config, level, scenario.seed, prompt_width, eager,
                                     diagnose)
        except Exception as error:  # isolate: one model's crash is that check's outcome, nothing more
            located = breaks.record_from_exception(error)
            where = f" at {located.where()}" if located.file else ""
            result.outcome = "error"
            result.message = f"{stage} failed{where}: {type(error).__name__}: {_first_line(error)}"
            if stage == "compiled generation":
                result.first_break = located
    return result


def static_cache_verdict(model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig, seed: int,
                          eager: torch.Tensor) -> str:
    """Whether ``generate`` itself changes its tokens with a static cache, which our loop must use.

    Measured: gpt_neo's local attention slices its band mask by the key length, so with a static cache
    longer than ``window_size`` its own ``generate(cache_implementation="static")`` differs from the default.
    That is the model's bug, not the loop's; the message says which.
    """
    import torch

    try:
        static = _seeded(seed, lambda: generate_fn(model)(**inputs, generation_config=_static_cache(config)))
    except Exception as error:  # the note is best effort; the mismatch stands
        return f" (model.generate with a static cache failed: {type(error).__name__}: {_first_line(error)})"
    if torch.equal(static, eager):
        return "; model.generate with a static cache gives the default tokens, so the difference is the loop's"
    where = first_difference(eager, static, int(inputs["input_ids"].shape[1]))
    return (f"; model.generate with a static cache differs from the default too (row {where.row}, position "
            f"{where.position}: {where.eager_token} vs {where.compiled_token}): the model's static-cache path "
            "is wrong, not the loop")


def _first_line(error: BaseException) -> str:
    return next((line for line in str(error).splitlines() if line.strip()), "")


def _forget_compiled(model: PreTrainedModel) -> None:
    """Start each compiled run from scratch: no dynamo cache or transformers-held compiled forward."""
    import torch

    torch._dynamo.reset()
    for attribute in ("_compiled_call", "_last_compile_config"):
        if attribute in vars(model):
            delattr(model, attribute)


def _compile_and_compare(result: CheckResult, model: PreTrainedModel, inputs: dict[str, Any],
                         config: GenerationConfig, level: Level, seed: int, prompt_width: int,
                         eager: torch.Tensor, diagnose: bool) -> None:
    import torch

    _forget_compiled(model)
    with breaks.capture_compile_events() as trace:
        backend = breaks.counting_backend(result.backend, trace)
        started = time.perf_counter()
        try:
            compiled = _seeded(seed, lambda: level.run_compiled(model, inputs, config, backend, True))
        except breaks.compile_failure_types() as error:
            result.timings["compile_s"] = time.perf_counter() - started
            record = breaks.record_from_exception(error)
            result.first_break = record
            result.outcome = "break" if breaks.is_graph_break(error) else "error"
            result.message = record.summary()
            if diagnose:
                _diagnose(result, model, inputs, config, level, seed)
                _blame_break_for_crash(result)
            return
        result.timings["compile_s"] = time.perf_counter() - started
    _record_graphs(result, trace)
    if level.single_graph is None:
        result.graph_count = None
    elif level.single_graph and trace.graph_count != 1:
        result.outcome = "break"
        result.message = (f"expected one graph, got {trace.graph_count} "
                          f"(recompiles: {'; '.join(trace.recompile_reasons) or 'none'})")
        return
    elif trace.graph_count == 0:
        result.outcome = "error"
        result.message = (f"nothing was compiled: transformers ran level {level.name!r} eagerly "
                          f"(model type {getattr(model.config, 'model_type', '?')!r} or its cache is not "
                          "compiled by generate)")
        return
    if torch.equal(eager, compiled):
        result.outcome = "pass"
        result.message = f"{trace.graph_count} graph(s), tokens equal to eager"
        return
    mismatch = first_difference(eager, compiled, prompt_width)
    mismatch.eager_logit_gap = eager_logit_gap(model, inputs, config, seed, mismatch)
    result.outcome, result.mismatch = "mismatch", mismatch
    result.message = f"compiled tokens differ from eager at {mismatch.describe()}"


def _diagnose(result: CheckResult, model: PreTrainedModel, inputs: dict[str, Any], config: GenerationConfig,
              level: Level, seed: int) -> None:
    """Re-run without fullgraph to collect every break; only failing checks pay for this pass."""
    _forget_compiled(model)
    started = time.perf_counter()
    with breaks.capture_compile_events() as trace:
        # Breaks are found by dynamo before any backend runs: the cheapest backend finds the same ones.
        backend = breaks.counting_backend("eager", trace)
        try:
            _seeded(seed, lambda: level.run_compiled(model, inputs, config, backend, False))
        except Exception as error:  # the diagnosis is best effort; the fullgraph outcome stands
            result.message += f" (diagnostic pass failed: {type(error).__name__}: {_first_line(error)})"
    result.timings["diagnose_s"] = time.perf_counter() - started
    result.breaks = trace.breaks
    _record_graphs(result, trace)
    _forget_compiled(model)


def _blame_break_for_crash(result: CheckResult) -> None:
    """A fullgraph compile that crashed inside PyTorch where the model also breaks is reported as that break.

    Measured: mpt's forward reads the cache length with ``Tensor.item()``; without fullgraph that is a clean
    break in ``modeling_mpt.py``, with fullgraph dynamo crashes (``PendingUnbackedSymbolNotFound``) a few frames
    later. The break is the model's; the crash stays in the message.
    """
    if result.outcome != "error" or result.first_break is None:
        return
    cause = next((record for record in result.breaks if record.root_cause), None)
    if cause is None:
        return
    crash = result.first_break
    result.outcome, result.first_break = "break", cause
    result.message = f"{cause.summary()} (with fullgraph=True the compiler crashed instead: {crash.summary()})"


def _record_graphs(result: CheckResult, trace: breaks.CompileTrace) -> None:
    result.graph_count, result.graph_ops = trace.graph_count, trace.graph_ops
    result.recompile_reasons = trace.recompile_reasons
    result.recompiles = len(trace.recompile_reasons)
