"""The registry: names mapped to ``ModelSpec``s (how to build one model under test), and selection by names,
keywords, glob patterns and tags, with close names when an entry selects nothing. ``registration`` fills it with
the built-in model types and the models a conftest registers.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.suggest import LIST_MODELS, close_names, did_you_mean, is_typo, spelled
from pytest_fullgraph.models.tags import TAG_MEANINGS, derived_tags

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
    #: the build of a scenario's config variant (``variants.VARIANTS``), None where the variant changes nothing in
    #: the model's config; None itself for models built only as given (registered, pretrained)
    variant_build: Callable[[str], Callable[[], PreTrainedModel] | None] | None = None

    def builder(self, variant: str = "") -> Callable[[], PreTrainedModel]:
        """The build of ``variant`` of the model, or its own build where the variant changes nothing in it."""
        built = self.variant_build(variant) if variant and self.variant_build else None
        return built or self.build

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


#: Where models must be registered, for error messages about names the session does not know.
REGISTRATION_HINT = ("models are registered before collection: from the rootdir conftest.py (or one next to "
                     "the paths on the command line), a plugin, or the pytest_fullgraph_register_models hook; "
                     "a conftest.py in a sub-directory is loaded too late")
#: The same, short enough for the one-line message about an unknown name.
SHORT_REGISTRATION_HINT = ("register it in the rootdir conftest.py or a plugin (a sub-directory's conftest.py loads "
                           "too late)")


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
