"""A check made concrete for a script: its model rebuilt through the registry, the config as a dict the script can
inline (only what differs from the class's defaults, checked to rebuild the same config), the prompts, the
generation config and the seeds, in the values a smaller variant can change (``reduce``).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.check.inputs import generation_config, left_padded_prompts, make_inputs, scenario_values
from pytest_fullgraph.check.scenarios import SCENARIOS
from pytest_fullgraph.core.model_facts import forward_parameters, vocab_size
from pytest_fullgraph.core.results import CheckResult, first_line
from pytest_fullgraph.models import DEFAULT_SEED, Registry
from pytest_fullgraph.models.tiny import PAD_TOKEN_ID
from pytest_fullgraph.repro.plan import Plan
from pytest_fullgraph.repro.project import project_classes
from pytest_fullgraph.repro.source import Script
from pytest_fullgraph.repro.verify import imports_package

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_ABSENT = object()


@dataclass(frozen=True)
class Case:
    """The values a reproducer is written from; ``reduce`` makes smaller ones with ``dataclasses.replace``."""

    model_class: type
    config_class: type
    #: the config's ``to_dict()`` (without ``transformers_version``): what the edits of ``reduce`` change
    config: dict[str, Any]
    vocab: int
    prompt_lengths: tuple[int, ...]
    scenario_seed: int
    generation: dict[str, Any]
    eos_token_id: int | None
    max_new_tokens: int
    dtype: str
    position_ids: bool
    #: the forward takes a ``cache`` argument (transformers 5's causal LMs do; a few keep only ``past_key_values``)
    takes_cache: bool
    #: the scenario hands ``generate`` Python objects (a tokenizer, a function) a script cannot inline
    generate_arguments: tuple[str, ...] = ()
    decode_step: bool = True
    reduced: tuple[str, ...] = field(default_factory=tuple)
    #: the classes transformers does not export (a conftest's model), by name, with the file each is imported from
    project: dict[str, str] = field(default_factory=dict)

    def with_tokens(self, tokens: int) -> Case:
        return replace(self, max_new_tokens=tokens, generation={**self.generation, "max_new_tokens": tokens})


def build_case(result: CheckResult, registry: Registry) -> Case | str:
    """The case of a check, or why none can be made here."""
    import torch

    if result.model not in registry:
        where = (f": its class {result.model_class} is in {result.model_file}; run pytest with --fullgraph-repro=DIR "
                 "where that file registers it" if result.model_file else " (a model of the report's own conftest?)")
        return f"model {result.model!r} is not registered here{where}"
    if result.scenario not in SCENARIOS:
        return f"scenario {result.scenario!r} is not built in"
    if result.device and not result.device.startswith("cpu"):
        return f"the check ran on {result.device}; scripts are written for the CPU"
    try:
        model: Any = registry[result.model].builder(SCENARIOS[result.scenario].model_variant)()
    except Exception as error:
        return f"the model does not build here ({type(error).__name__}: {first_line(error)})"
    if result.dtype != "float32":
        model = model.to(getattr(torch, result.dtype))
    project = project_classes((type(model), type(model.config)))
    if isinstance(project, str):
        return project
    scenario = SCENARIOS[result.scenario]
    inputs = make_inputs(model, scenario)
    with torch.no_grad():
        eos, settings = scenario_values(model, inputs, scenario, result.max_new_tokens)
    generation = generation_config(scenario, result.max_new_tokens, eos, settings).to_diff_dict()
    generation.pop("transformers_version", None)
    parameters = forward_parameters(model)
    return Case(type(model), type(model.config), plain_config(model.config), vocab_size(model), scenario.prompt_lengths,
                scenario.seed, generation, eos, result.max_new_tokens, result.dtype, "position_ids" in parameters,
                "cache" in parameters, tuple(scenario.generate_kwargs), project=project)


def parameter_count(case: Case) -> int | None:
    """The parameters the case's model would have, counted on the meta device (nothing allocated); None when the
    class refuses the config."""
    import torch

    try:
        with torch.device("meta"):
            model = case.model_class(case.config_class(**case.config))
    except Exception:  # a config the class refuses: no model to count
        return None
    return sum(parameter.numel() for parameter in model.parameters())


def same_weights(case: Case, result: CheckResult, registry: Registry) -> bool:
    """Whether ``torch.manual_seed(DEFAULT_SEED)`` and the class on the inlined config give the suite's weights: a
    token mismatch depends on them; a break or an error does not."""
    import torch

    built: Any = registry[result.model].builder(SCENARIOS[result.scenario].model_variant)()
    torch.manual_seed(DEFAULT_SEED)
    rebuilt = case.model_class(case.config_class(**shortest_config(case.config_class, case.config)))
    ours, theirs = built.state_dict(), rebuilt.state_dict()
    return list(ours) == list(theirs) and all(torch.equal(ours[name], theirs[name]) for name in ours)


def plain_config(config: PretrainedConfig) -> dict[str, Any]:
    """A config's ``to_dict()`` without the version that wrote it, which a rebuilt config would differ in."""
    values = config.to_dict()
    values.pop("transformers_version", None)
    return values


def rebuilds(config_class: type, values: dict[str, Any], target: dict[str, Any]) -> bool:
    """Whether ``config_class(**values)`` is the config ``target`` is the dict of."""
    try:
        return plain_config(config_class(**values)) == target
    except Exception:  # a config that refuses the values does not rebuild it
        return False


def shortest_config(config_class: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` without what the class's defaults give anyway (sub-configs alike), still rebuilding the same
    config: a value equal to a default may be needed where the default derives from another field."""
    try:
        default = plain_config(config_class())
    except Exception:  # a config without defaults for everything: inline it whole
        return dict(values)
    kept = {key: value for key, value in values.items() if value != default.get(key, _ABSENT)}
    if not rebuilds(config_class, kept, values):
        kept = dict(values)
        for key in [key for key, value in values.items() if value == default.get(key, _ABSENT)]:
            trial = {name: value for name, value in kept.items() if name != key}
            if rebuilds(config_class, trial, values):
                kept = trial
    for key, value in list(kept.items()):
        inner_default = default.get(key)
        if isinstance(value, dict) and isinstance(inner_default, dict):
            inner = {name: item for name, item in value.items() if item != inner_default.get(name, _ABSENT)}
            if rebuilds(config_class, {**kept, key: inner}, values):
                kept[key] = inner
    return kept


def versions(environment: dict[str, Any]) -> str:
    """The report's versions and this machine's, as the header says them."""
    import torch
    import transformers

    here = f"torch {torch.__version__}, transformers {transformers.__version__}, Python {platform.python_version()}"
    recorded = (f"torch {environment.get('torch', '?')}, transformers {environment.get('transformers', '?')}, "
                f"Python {environment.get('python', '?')}")
    return f"Recorded with {recorded}" + ("" if recorded == here else f"; written with {here}")


def script_for(case: Case, plan: Plan, template: str, check_ids: list[str], result: CheckResult,
               environment: dict[str, Any]) -> Script:
    """The script of ``template`` for a case; a group's representative check first among ``check_ids``."""
    prompts = left_padded_prompts(case.prompt_lengths, case.scenario_seed, case.vocab)
    ids = [result.check_id, *[check_id for check_id in check_ids if check_id != result.check_id]]
    return Script(
        template, plan.expected, tuple(ids), case.model_class.__name__, case.config_class.__name__,
        shortest_config(case.config_class, case.config), prompts["input_ids"].tolist(),
        prompts["attention_mask"].tolist(), generation=case.generation, eos_token_id=case.eos_token_id,
        pad_token_id=PAD_TOKEN_ID, weights_seed=DEFAULT_SEED,
        seed=case.scenario_seed, dtype=case.dtype, cache_len=max(case.prompt_lengths) + case.max_new_tokens - 1,
        decode_step=case.decode_step, static=plan.static, float64=plan.float64, position_ids=case.position_ids,
        backend=result.backend,
        versions=versions(environment), reduced=case.reduced, project=case.project,
        stand_in=any(registers_with_us(path) for path in case.project.values()))


def registers_with_us(path: str) -> bool:
    """Whether a project's file imports pytest_fullgraph (a conftest that registers its model does): the script
    then gives those imports a stand-in, as it runs where pytest_fullgraph need not be installed."""
    try:
        return imports_package(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):  # unreadable here: the stand-in costs nothing if it is not needed
        return True
