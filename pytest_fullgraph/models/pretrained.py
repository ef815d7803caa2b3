"""Real checkpoints from a local directory (``--fullgraph-pretrained=NAME=DIR``), checked next to the tiny models.

Loaded with ``from_pretrained(DIR, local_files_only=True)``: nothing is downloaded at run time. The directory
is validated when the run starts (it exists, and transformers reads its config), so a wrong path is a usage
error naming it rather than one failed build per check.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.results import first_line
from pytest_fullgraph.models import ModelSpec, Registry

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: The tag every model registered from a directory carries (``--fullgraph-models=tag:pretrained``).
PRETRAINED_TAG = "pretrained"


def parse_pretrained(value: str, source: str) -> dict[str, Path]:
    """``"mine=/ckpt/a,other=/ckpt/b"`` -> {name: directory}; a malformed entry is a ``ValueError`` naming it."""
    found: dict[str, Path] = {}
    for entry in (part.strip() for part in value.split(",")):
        name, separator, directory = entry.partition("=")
        name, directory = name.strip(), directory.strip()
        if not separator or not name or not directory:
            raise ValueError(f"{source}: {entry!r} is not NAME=DIR (e.g. mine=/path/to/checkpoint)")
        if name in found:
            raise ValueError(f"{source}: {name!r} is given twice")
        found[name] = Path(directory).expanduser()
    return found


def check_directory(name: str, directory: Path, source: str) -> Any:
    """The checkpoint's config (kept, so start-up can check its limits); a ``ValueError`` naming the directory
    when it cannot be loaded."""
    if not directory.is_dir():
        raise ValueError(f"{source}: {name}={directory}: no such directory")
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(directory), local_files_only=True)
    except Exception as error:  # transformers' errors for a bad directory vary: OSError, ValueError, KeyError
        raise ValueError(f"{source}: {name}={directory}: transformers cannot read a model config there "
                         f"({type(error).__name__}: {first_line(error)})") from None
    return config


def _same(config: Any) -> Any:
    """The config read at registration, for ``ModelSpec.config``: the directory is not read twice."""
    return config


def loader(directory: Path) -> Callable[[], PreTrainedModel]:
    """Builds the checkpoint's causal LM in float32 and eval mode, from local files only."""

    def build() -> PreTrainedModel:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True, dtype=torch.float32)
        return model.eval()

    return build


def register_pretrained(registry: Registry, value: str, source: str) -> tuple[str, ...]:
    """Register every NAME=DIR of ``value``; returns the names. A bad entry or directory is a ``ValueError``."""
    return register_directories(registry, parse_pretrained(value, source), source)


def register_directories(registry: Registry, directories: Mapping[str, Path], source: str) -> tuple[str, ...]:
    """Register each checkpoint directory (its config is read now) as a model; returns the names.

    A directory transformers cannot read, or a name already registered, is a ``ValueError`` led by ``source``.
    """
    names = []
    for name, directory in directories.items():
        if name in registry:  # replace=True is Python's way out; on the command line, another name is
            raise ValueError(f"{source}: {name}={directory}: {name!r} is already a model's name; give the "
                             f"checkpoint another NAME, e.g. my_{name}={directory}")
        config = check_directory(name, directory, source)
        registry.add(ModelSpec(name, loader(directory), str(config.model_type), frozenset({PRETRAINED_TAG}),
                               config=functools.partial(_same, config)))
        names.append(name)
    return tuple(names)
