"""The table of decoding modes: one row (``Mode``) per mode, declared by the mode's own module as its ``MODE``.

The loop core (greedy and sampling, ``decode``) is a row too; the others are listed in ``LINES``, in the order a plan
asks them. Planning, both loop forms, exported programs and ``check.scenarios`` read the rows, so adding a mode is
its module and its line here. The plan a loop runs (``DecodePlan``) holds its row, so both live here. No torch at
import: ``check.scenarios``, which torch-free reports read, takes the
features from ``LINES``, and the mode modules load when a row is first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_fullgraph.core.generation import UnsupportedGeneration

if TYPE_CHECKING:
    import torch
    from transformers import GenerationConfig, PreTrainedModel
    from transformers.generation.logits_process import LogitsProcessorList

T = TypeVar("T")


@dataclass
class DecodePlan:
    """What ``generate`` decides on the host, decided once before the graph."""

    config: GenerationConfig
    processors: LogitsProcessorList
    max_new_tokens: int
    do_sample: bool
    eos: torch.Tensor | None
    pad: torch.Tensor | None
    accepts_position_ids: bool
    logits_to_keep: bool
    #: the decoding mode's row in ``modes.table`` (the loop core's for greedy and sampling)
    mode: Mode
    #: what the mode adds to the plan, its settings (``settings`` reads them), None for the loop core
    mode_settings: Any = None
    #: whether decode steps get the attention mask; some models (mamba) take it at prefill only
    mask_when_decoding: bool = True
    #: whether the model builds its own masks for ``generate`` (``create_masks_for_generate``), which the loop
    #: then calls as ``generate`` does
    own_generate_masks: bool = False
    #: transformers' ``StopStringCriteria`` for ``stop_strings`` (built with the tokenizer before the graph; its
    #: call is tensor work on the sequence's last tokens), or None
    stop_strings: Any = None

    def settings(self, kind: type[T]) -> T:
        """The mode's settings, which a mode's own code knows the type of."""
        if not isinstance(self.mode_settings, kind):
            raise TypeError(f"a {self.mode.name!r} plan holds {type(self.mode_settings).__name__} settings, not "
                            f"{kind.__name__}")
        return self.mode_settings

    @property
    def drafting(self) -> Any:
        """The settings of a mode that rolls its cache back (a draft-and-verify mode), else None."""
        return self.mode_settings if self.mode.rolls_back else None


def trimmed(sequences: torch.Tensor, input_ids: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """The one host synchronisation, after the graph: generate's output stops where the last row finished."""
    return sequences[:, : int(input_ids.shape[1]) + int(steps)]


#: The loop forms (``fullgraph_generate(loop=...)``): "unrolled" (one graph whose size grows with max_new_tokens)
#: and "while" (decode steps as a ``while_loop`` body: constant graph size, early exit when every row has finished).
FORMS = ("unrolled", "while")
#: The exported programs (``export_generate``) of either form: "static" (the example's shapes), "dynamic" (many
#: batch sizes and prompt lengths) and "noise_input" (sampling noise as an input, for a runtime without a generator).
EXPORTS = ("static", "dynamic", "noise_input")
#: The modes beyond the loop core, by module (``pytest_fullgraph.loop.modes.<name>``, whose ``MODE`` is named so),
#: in the order a plan asks them (a beam width first, then a prompt lookup, then a draft model, as ``generate``
#: picks), with the features of their scenarios (``check.scenarios``).
LINES: dict[str, tuple[str, ...]] = {
    "beam": ("beam_search", "beam_sample", "beam_eos"),
    "lookup": ("prompt_lookup",),
    "assisted": ("assisted", "assisted_sample"),
}
#: Scenario features that are a decoding mode of their own, not the core's greedy or sampling.
FEATURES = tuple(feature for features in LINES.values() for feature in features)
#: The module whose ``MODE`` is the loop core's row: every plan no other row claims runs it.
CORE = "pytest_fullgraph.loop.decode"

#: A loop: ``(model, plan, input_ids, attention_mask, cache)``, the ``while`` form's also ``limit``, to its outputs.
LoopFunction = Callable[..., Any]


@dataclass(frozen=True)
class Refusal:
    """A form a mode does not run: the ``UnsupportedGeneration`` message that says so before any work."""

    message: str


@dataclass(frozen=True)
class PlanRequest:
    """What a row's ``plan`` reads: ``generate``'s resolved config and what ``prepare`` resolved with it."""

    config: GenerationConfig
    assistant: Any
    max_new_tokens: int
    processors: Any
    input_ids: torch.Tensor
    eos: torch.Tensor | None
    pad: torch.Tensor | None


def _nothing(*_: Any) -> None:
    """A refusal hook that refuses nothing."""


def _no_models(_: DecodePlan) -> dict[str, Any]:
    return {}


def _no_positions(_: DecodePlan) -> int:
    return 0


def _same_width(_: DecodePlan, vocab: int) -> int:
    return vocab


@dataclass(frozen=True, eq=False)  # a row is itself: compared and hashed by identity
class Mode:
    """One decoding mode: what it adds to the plan, its loop per form or a refusal, its refusals, and what its
    loop's outputs and exported programs are. The defaults are the loop core's."""

    name: str
    #: ``generate``'s modes (``GenerationConfig.get_generation_mode``) it runs
    generation_modes: tuple[str, ...]
    #: its settings for a plan it claims (``PlanRequest`` to settings), None for a plan it does not
    plan: Callable[[PlanRequest], Any]
    #: every form of ``FORMS``: its loop, or a refusal
    loops: Mapping[str, LoopFunction | Refusal]
    #: refusals with the model's cache, before any graph: ``(model, plan, input_ids, cache, loop)``
    check: Callable[[PreTrainedModel, DecodePlan, torch.Tensor, Any, str], None] = _nothing
    #: refusals of the resolved config, before any plan, whatever mode it picks: ``(config, assistant, mode)``
    check_config: Callable[[GenerationConfig, Any, str], None] = _nothing
    #: ``planning.UNSUPPORTED_SETTINGS`` it honours, and the decoding a refusal of them names as supported
    honours: tuple[str, ...] = ()
    honoured_in: str = "greedy and sampling"
    #: every export of ``EXPORTS``: True, or a refusal
    exports: Mapping[str, bool | Refusal] = field(default_factory=lambda: dict.fromkeys(EXPORTS, True))
    #: whether it rolls its cache back: then it runs on the loop's cache in either form and checks its processors
    rolls_back: bool = False
    #: cache positions it needs beyond ``generate``'s (prompt + max_new_tokens - 1)
    extra_positions: Callable[[DecodePlan], int] = _no_positions
    #: the models it runs besides the target, by the name an exported program holds them under
    models: Callable[[DecodePlan], dict[str, Any]] = _no_models
    #: what ``generate`` returns from its loop's outputs ``(outputs, plan, input_ids)``, plan None for an exported
    #: program's (which returns the sequences); None: the core's (``trimmed``)
    result: Callable[[tuple[Any, ...], DecodePlan | None, torch.Tensor], Any] | None = None
    #: how many tensors its loop returns: an exported program's outputs say its mode by their number
    outputs: int = 2
    #: the sampling noise a ``noise_input`` program takes per row and step, from the logits' width
    noise_width: Callable[[DecodePlan, int], int] = _same_width

    def __post_init__(self) -> None:
        for what, table, known in (("loops", self.loops, FORMS), ("exports", self.exports, EXPORTS)):
            if set(table) != set(known):
                raise ValueError(f"mode {self.name!r} declares {what} {tuple(table)}; each of {known} is needed, and "
                                 "no other (a Refusal for one it does not run)")

    def loop(self, form: str) -> LoopFunction:
        """Its loop in ``form``, or ``UnsupportedGeneration`` with its refusal."""
        found = self.loops[form]
        if isinstance(found, Refusal):
            raise UnsupportedGeneration(found.message)
        return found

    def check_export(self, export: str) -> None:
        """``UnsupportedGeneration`` with its refusal when it has one for ``export``."""
        found = self.exports[export]
        if isinstance(found, Refusal):
            raise UnsupportedGeneration(found.message)

    def generated(self, outputs: tuple[Any, ...], plan: DecodePlan | None, input_ids: torch.Tensor) -> Any:
        """What ``generate`` returns for its loop's ``outputs``."""
        if self.result is not None:
            return self.result(outputs, plan, input_ids)
        sequences, steps = outputs
        return trimmed(sequences, input_ids, steps)


#: The rows of ``LINES`` once loaded, and those ``register``ed, by name.
_LOADED: dict[str, Mode] = {}
_REGISTERED: dict[str, Mode] = {}


def _row(module: str) -> Mode:
    mode = importlib.import_module(module).MODE
    if not isinstance(mode, Mode):
        raise TypeError(f"{module}.MODE is a {type(mode).__name__}, not a Mode")
    return mode


def modes() -> tuple[Mode, ...]:
    """The rows beyond the core, in the order a plan asks them: ``LINES``'s, then those registered."""
    for name in LINES:
        if name not in _LOADED:
            mode = _row(f"{__package__}.{name}")
            if mode.name != name:
                raise ValueError(f"{__package__}.{name} declares a MODE named {mode.name!r}")
            _LOADED[name] = mode
    return (*(_LOADED[name] for name in LINES), *_REGISTERED.values())


def core() -> Mode:
    """The loop core's row: greedy and sampling."""
    return _row(CORE)


def register(mode: Mode) -> None:
    """Add a row after the others (``unregister`` takes it out): a mode declared outside ``LINES``, as a test's."""
    if mode.name in {*LINES, *_REGISTERED, core().name}:
        raise ValueError(f"a mode named {mode.name!r} is in the table already")
    _REGISTERED[mode.name] = mode


def unregister(name: str) -> None:
    """Take out a row ``register`` added."""
    if name not in _REGISTERED:
        raise ValueError(f"{name!r} is not a registered mode (registered: {', '.join(_REGISTERED) or 'none'})")
    del _REGISTERED[name]


def claim(request: PlanRequest) -> tuple[Mode, Any]:
    """The row that runs a plan and its settings: the first that claims it, else the core with none."""
    for mode in modes():
        settings = mode.plan(request)
        if settings is not None:
            return mode, settings
    return core(), None


def supported_modes() -> tuple[str, ...]:
    """``generate``'s modes the loop runs: the core's, then the other rows' in order."""
    found = [*core().generation_modes, *(name for mode in modes() for name in mode.generation_modes)]
    return tuple(dict.fromkeys(found))


def program_result(outputs: tuple[Any, ...], input_ids: torch.Tensor) -> Any:
    """What ``generate`` returns from an exported program's outputs: the row whose loop returns as many, with a
    result of its own, else the core's."""
    mode = next((mode for mode in modes() if mode.result is not None and mode.outputs == len(outputs)), core())
    return mode.generated(outputs, None, input_ids)
