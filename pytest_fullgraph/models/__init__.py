"""The model registry: names mapped to ``ModelSpec``s that build tiny, seeded causal LMs without downloads, and
selection by names, keywords, glob patterns and tags.

How a model type is made tiny is in ``build``; the data behind it (the generic shrink and the records) in
``tiny``; the tags derived from configs in ``tags``.

May import ``core`` only.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.suggest import LIST_MODELS, close_names, did_you_mean, is_typo, spelled
from pytest_fullgraph.models import build as _build
from pytest_fullgraph.models.build import (
    DEFAULT_SEED,
    MAX_TINY_PARAMETERS,
    TooLargeToBuild,
    build_tiny,
    class_facts,
    count_parameters,
    installed_model_types,
    tiny_config,
    tiny_config_kwargs,
)
from pytest_fullgraph.models.tags import TAG_MEANINGS, derived_tags
from pytest_fullgraph.models.tiny import RECORDS

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: Selection keywords accepted beside model names, glob patterns and ``tag:NAME``.
KEYWORDS = ("all", "popular")
TAG_PREFIX = "tag:"
GLOB_CHARACTERS = "*?["


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model under test.

    ``build`` returns a causal LM in eval mode; it is called once per worker and cached, so it must be
    deterministic (seed inside it) for xdist workers and CI shards to test the same weights.
    """

    name: str
    build: Callable[[], PreTrainedModel]
    family: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)
    #: why this model cannot be checked; its checks are then skipped with this reason, and it is never built
    known_reason: str = ""
    #: the transformers model type a built-in model is built from ("" for models registered by users): its
    #: config's defaults give the derived tags (``tag:moe``, ``tag:sliding``, ...)
    model_type: str = ""
    #: the model's config without building it (the tiny config of a built-in type, a checkpoint's own), so that
    #: start-up can check limits such as its positions; None where only the build knows it (``register_model``)
    config: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if (not self.name or self.name in KEYWORDS or self.name != self.name.strip()
                or any(character in self.name for character in "," + GLOB_CHARACTERS)
                or self.name.startswith(TAG_PREFIX)):
            raise ValueError(f"invalid model name {self.name!r}: must be non-empty, without commas, glob "
                             f"characters ({GLOB_CHARACTERS}) or spaces around it, not start with "
                             f"{TAG_PREFIX!r}, and not be one of the keywords {', '.join(KEYWORDS)}")
        if not callable(self.build):
            raise TypeError(f"model {self.name!r}: build must be callable, got {type(self.build).__name__}")
        object.__setattr__(self, "tags", frozenset(self.tags))
        if not self.family:
            object.__setattr__(self, "family", self.name)


def tiny_spec(model_type: str) -> ModelSpec:
    """A registry entry for a transformers model type: its record in ``tiny.RECORDS``, else the generic shrink."""

    def build() -> PreTrainedModel:
        return build_tiny(model_type)

    def config() -> Any:
        return tiny_config(model_type)

    record = RECORDS.get(model_type)
    if record is None:
        return ModelSpec(model_type, build, model_type=model_type, config=config)
    return ModelSpec(model_type, build, record.family_name, record.tags, record.known_reason, model_type, config)


__all__ = [
    "DEFAULT_SEED",
    "MAX_TINY_PARAMETERS",
    "ModelSpec",
    "Registry",
    "TooLargeToBuild",
    "build_tiny",
    "builtin_registry",
    "class_facts",
    "count_parameters",
    "installed_model_types",
    "register_model",
    "session_registry",
    "tiny_config",
    "tiny_config_kwargs",
    "tiny_spec",
]


def _split(expression: str) -> list[str]:
    return [part.strip() for part in expression.split(",") if part.strip()]


class Registry:
    """A name → ModelSpec mapping with selection by names, keywords, glob patterns and tags.

    ``more`` supplies further specs on first need (every installed transformers type): resolving "llama,gemma"
    imports neither torch nor transformers, so the plugin stays light in projects that do not use it.
    """

    def __init__(self, specs: Iterable[ModelSpec] = (), *,
                 more: Callable[[], Iterable[ModelSpec]] | None = None) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._more: Callable[[], Iterable[ModelSpec]] | None = None
        for spec in specs:
            self.add(spec)
        self._more = more

    def _load_more(self) -> None:
        more, self._more = self._more, None
        for spec in more() if more is not None else ():
            self._specs.setdefault(spec.name, spec)  # what was registered explicitly wins

    def add(self, spec: ModelSpec, *, replace: bool = False) -> None:
        if not replace and spec.name not in self._specs and self._more is not None:
            self._load_more()  # a name that an installed type has needs replace=True too
        if spec.name in self._specs and not replace:
            raise ValueError(f"model {spec.name!r} is already registered; pass replace=True to override it")
        self._specs[spec.name] = spec

    def register(
        self,
        name: str,
        build: Callable[[], PreTrainedModel],
        *,
        family: str = "",
        tags: Iterable[str] = (),
        known_reason: str = "",
        replace: bool = False,
    ) -> ModelSpec:
        spec = ModelSpec(name, build, family, frozenset(tags), known_reason)
        self.add(spec, replace=replace)
        return spec

    def __getitem__(self, name: str) -> ModelSpec:
        if name not in self._specs:
            self._load_more()
        return self._specs[name]

    def __contains__(self, name: object) -> bool:
        if name not in self._specs:
            self._load_more()
        return name in self._specs

    def __iter__(self) -> Iterator[ModelSpec]:
        self._load_more()
        return iter([self._specs[name] for name in sorted(self._specs)])

    def __len__(self) -> int:
        self._load_more()
        return len(self._specs)

    def names(self) -> list[str]:
        self._load_more()
        return sorted(self._specs)

    def tags_of(self, name: str) -> frozenset[str]:
        """The tags a spec was given and, for a built-in model type, those its config's defaults imply."""
        spec = self[name]
        return spec.tags | (derived_tags(spec.model_type) if spec.model_type else frozenset())

    def all_tags(self) -> list[str]:
        return sorted(set(TAG_MEANINGS) | {tag for name in self.names() for tag in self.tags_of(name)})

    def select(self, expression: str, exclude: str = "") -> tuple[str, ...]:
        """The sorted model names that ``expression`` selects, less those ``exclude`` selects.

        Both are comma lists of names (in any case: ``LLAMA`` is llama), keywords (``all``, ``popular``), glob
        patterns (``qwen*``) and tags (``tag:moe``). Raises ``ValueError`` naming every entry that selects
        nothing, with close names.
        """
        selected = self.resolve(expression) - (self.resolve(exclude) if exclude.strip() else set())
        if not selected:
            raise ValueError(f"excluding {exclude!r} leaves none of the models {expression!r} selects")
        return tuple(sorted(selected))

    def resolve(self, expression: str) -> set[str]:
        """The names one comma list selects; a ``ValueError`` for an empty list or an entry that selects none."""
        entries = _split(expression)
        if not entries:
            raise ValueError(f"{expression!r} selects no model; give names, all, popular, tag:TAG or a glob "
                             f"such as qwen* ({LIST_MODELS} lists them)")
        selected: set[str] = set()
        problems: list[str] = []
        for entry in entries:
            matched = self._matches(entry)
            if not matched:
                problems.append(self._problem(entry, matched))
            selected.update(matched or ())
        if problems:
            # a name that is no typo of a registered one may be the user's own model, registered too late
            stranger = any(self._matches(entry) is None and not is_typo(entry, self.names()) for entry in entries)
            raise ValueError(f"{', '.join(problems)}; {LIST_MODELS} lists all {len(self)} models"
                             + (f"; a model of your own: {SHORT_REGISTRATION_HINT}" if stranger else ""))
        return selected

    def _problem(self, entry: str, matched: set[str] | None) -> str:
        """What is wrong with an entry that selects nothing, with close names when there are."""
        if entry.lower().startswith(TAG_PREFIX):
            tag, tags = entry[len(TAG_PREFIX):].lower(), [tag.lower() for tag in self.all_tags()]
            if tag in tags:
                return f"no model has {entry!r}"
            close = close_names(tag, tags)
            return f"unknown tag {entry!r}" + (f" (did you mean {', '.join(TAG_PREFIX + t for t in close)}?)"
                                              if close else "")
        if matched is None:
            return f"unknown model {entry!r}{did_you_mean(entry, self.names())}"
        return f"{entry!r} matches no model"

    def _matches(self, entry: str) -> set[str] | None:
        """The names one entry selects; ``None`` for a name that is not registered in any case."""
        key = entry.lower()
        if key == "all":
            return set(self.names())
        if key == "popular" or key.startswith(TAG_PREFIX):
            tag = key.removeprefix(TAG_PREFIX)
            return {name for name in self.names() if tag in {own.lower() for own in self.tags_of(name)}}
        if any(character in entry for character in GLOB_CHARACTERS):
            return {name for name in self.names() if fnmatch.fnmatchcase(name.lower(), key)}
        name = self.spelling(entry)
        return None if name is None else {name}

    def spelling(self, name: str) -> str | None:
        """The registered name ``name`` spells: itself, or the one name equal to it in another case."""
        return name if name in self else spelled(name, self.names())

    def unknown(self, name: str) -> str:
        """A one-line message for a model name this registry does not know."""
        return (f"unknown model {name!r}{did_you_mean(name, self.names())}; {LIST_MODELS} lists all "
                f"{len(self)} models")


def builtin_registry() -> Registry:
    """The records' model types now; every other installed transformers type on first need."""
    return Registry([tiny_spec(model_type) for model_type in RECORDS],
                    more=lambda: [tiny_spec(model_type) for model_type in _build.installed_model_types()])


#: Models registered by ``register_model`` from conftest files; merged into each session's registry.
_external = Registry()
#: True while a session collects: a conftest loaded then registers too late for the session to see it.
_registrations_closed = False
#: Where models must be registered, for error messages about names the session does not know.
REGISTRATION_HINT = ("models are registered before collection: from the rootdir conftest.py (or one next to "
                     "the paths on the command line), a plugin, or the pytest_fullgraph_register_models hook; "
                     "a conftest.py in a sub-directory is loaded too late")
#: The same, short enough for the one-line message about an unknown name.
SHORT_REGISTRATION_HINT = ("register it in the rootdir conftest.py or a plugin (a sub-directory's conftest.py loads "
                           "too late)")


def register_model(
    name: str,
    build: Callable[[], PreTrainedModel],
    *,
    family: str = "",
    tags: Iterable[str] = (),
    known_reason: str = "",
    replace: bool = False,
) -> ModelSpec:
    """Register a model from a conftest.py (or any module imported before collection).

    A name that is already built in, or registered before, needs ``replace=True``. ``known_reason`` says why
    the model cannot be checked yet: its checks are then xfail with that reason and it is never built.
    """
    if _registrations_closed:
        raise RuntimeError(f"register_model({name!r}) ran after the session chose its models (during "
                           f"collection); {REGISTRATION_HINT}")
    if not replace and name in builtin_registry():
        raise ValueError(f"model {name!r} is already registered; pass replace=True to override it")
    return _external.register(name, build, family=family, tags=tags, known_reason=known_reason, replace=replace)


def session_registry() -> Registry:
    """Built-in specs overlaid with the externally registered ones."""
    registry = builtin_registry()
    for spec in _external:
        registry.add(spec, replace=True)
    return registry


def close_registrations(closed: bool) -> None:
    """Called around collection: ``register_model`` then raises, naming where registration must happen."""
    global _registrations_closed
    _registrations_closed = closed


def forget_external_models() -> None:
    """Drop conftest registrations at session end (pytester runs many sessions in one process)."""
    global _external, _registrations_closed
    _external = Registry()
    _registrations_closed = False
