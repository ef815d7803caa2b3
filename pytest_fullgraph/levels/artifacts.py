"""A whole generation, exported as one program, saved as an artifact a user can ship, and loaded back.

The runtimes are a table (``RUNTIMES``): each has a writer, a loader, a file suffix, the loop forms it accepts
and what else it refuses, so a new one (ExecuTorch's .pte) is a row, not a branch. Beside every artifact goes a
metadata file (``<artifact>.json``): the model, the generation settings baked into the program, the input shapes it was
exported for, and the torch / transformers / pytest_fullgraph versions. ``load_generate`` checks all of it before
it runs anything: an AOTInductor package does not check its inputs itself (fed another shape it returned wrong
tokens, measured), and a program from another torch may not load or may load and differ.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_fullgraph.core.suggest import did_you_mean
from pytest_fullgraph.levels import executorch_runtime

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

METADATA_SCHEMA = "pytest_fullgraph/generation-artifact"
METADATA_VERSION = 1
METADATA_SUFFIX = ".json"

#: What an artifact's loader returns: the program, taking its inputs (``input_ids``, ``attention_mask`` and, for the
#: ``while`` form, ``max_new_tokens``) and returning its own outputs, ``(sequences, steps)``.
RawProgram = Callable[..., tuple["torch.Tensor", "torch.Tensor"]]


class ArtifactError(Exception):
    """An artifact that cannot be used: missing, corrupted, of another version, or called with other shapes.

    The message names the file and what is wrong, in one line.
    """


@dataclass(frozen=True)
class Runtime:
    """One way to ship an exported generation: how it is written, loaded, and which loop forms it takes."""

    name: str
    suffix: str
    loop_forms: tuple[str, ...]
    description: str
    write: Callable[[ExportedProgram, Path], None]
    load: Callable[[Path], RawProgram]
    #: why this runtime cannot take a program, from its metadata (None: it can), said before writing starts
    refusal: Callable[[dict[str, Any]], str | None] = lambda metadata: None
    #: the packages it needs beyond torch, and the extra of this package that installs them
    requires: tuple[str, ...] = ()
    extra: str = ""

    def unavailable(self) -> str | None:
        """Which of its packages are missing and how to install them, or None."""
        missing = [name for name in self.requires if find_spec(name) is None]
        if not missing:
            return None
        return f"needs {', '.join(missing)}: pip install 'pytest_fullgraph[{self.extra}]'"


def _write_pt2(program: ExportedProgram, path: Path) -> None:
    import torch

    torch.export.save(program, str(path))


def _load_pt2(path: Path) -> RawProgram:
    import torch

    module = torch.export.load(str(path)).module()
    return lambda *inputs: module(*inputs)


def _write_aoti(program: ExportedProgram, path: Path) -> None:
    import torch._inductor

    torch._inductor.aoti_compile_and_package(program, package_path=str(path))


def _load_aoti(path: Path) -> RawProgram:
    import torch._inductor

    runner = torch._inductor.aoti_load_package(str(path))
    return lambda *inputs: tuple(runner(*inputs))


#: The runtimes an exported generation can be saved for.
RUNTIMES: dict[str, Runtime] = {runtime.name: runtime for runtime in (
    Runtime("pt2", ".pt2", ("unrolled", "while"), "torch.export.save: the ExportedProgram, run by torch.export.load",
            _write_pt2, _load_pt2),
    Runtime("aoti", ".aoti.pt2", ("unrolled", "while"),
            "an AOTInductor package (torch._inductor.aoti_compile_and_package): compiled C++ kernels, run by "
            "torch._inductor.aoti_load_package", _write_aoti, _load_aoti),
    Runtime("executorch", ".pte", ("unrolled",),
            "an ExecuTorch program with the XNNPACK delegate, run by ExecuTorch's runtime (extra: executorch)",
            lambda program, path: executorch_runtime.write(program, path, delegate=True),
            executorch_runtime.load, executorch_runtime.refusal, ("executorch",), "executorch"),
    Runtime("executorch_portable", ".portable.pte", ("unrolled",),
            "an ExecuTorch program on its portable kernels alone, no delegate (extra: executorch)",
            lambda program, path: executorch_runtime.write(program, path, delegate=False),
            executorch_runtime.load, executorch_runtime.refusal, ("executorch",), "executorch"),
)}  # fmt: skip


def _versions() -> dict[str, str]:
    import torch
    import transformers

    from pytest_fullgraph import __version__

    return {"torch": torch.__version__, "transformers": transformers.__version__, "pytest_fullgraph": __version__}


def _release(version: str) -> str:
    """major.minor: a program is refused across releases, not across local builds of one (2.13.0+cpu, 2.13.1)."""
    return ".".join(version.split("+")[0].split(".")[:2])


def save_generate(generate: Any, path: str | Path, *, runtime: str = "pt2", model: str = "") -> Path:
    """Save what ``export_generate`` returned as an artifact at ``path`` (the suffix is the runtime's), with its
    metadata beside it; returns the artifact's path. ``model`` names the model in the metadata."""
    if runtime not in RUNTIMES:
        raise ArtifactError(f"runtime {runtime!r} is not known; use one of {', '.join(RUNTIMES)}")
    chosen = RUNTIMES[runtime]
    metadata = dict(getattr(generate, "artifact_metadata", None) or {})
    if not metadata or not hasattr(generate, "exported_program"):
        raise ArtifactError("save_generate takes what export_generate returned (an exported program with its "
                            "settings), not another callable")
    if metadata["loop"] not in chosen.loop_forms:
        raise ArtifactError(f"runtime {runtime!r} takes the loop forms {', '.join(chosen.loop_forms)}, not "
                            f"{metadata['loop']!r}")
    refused = chosen.refusal(metadata) or chosen.unavailable()
    if refused is not None:
        raise ArtifactError(f"runtime {runtime!r} {refused}")
    path = Path(path)
    if not path.name.endswith(chosen.suffix):
        path = path.with_name(path.name + chosen.suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    chosen.write(generate.exported_program, path)
    metadata.update({"schema": METADATA_SCHEMA, "version": METADATA_VERSION, "runtime": runtime, "model": model,
                     "versions": _versions()})
    metadata_path(path).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    return path


def metadata_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + METADATA_SUFFIX)


def read_metadata(artifact: str | Path) -> dict[str, Any]:
    """The metadata saved beside ``artifact``, validated; ``ArtifactError`` naming what is wrong."""
    path = metadata_path(Path(artifact))
    try:
        data = json.loads(path.read_text())
    except OSError as error:
        raise ArtifactError(f"{path}: cannot read the artifact's metadata ({error.strerror or error})") from None
    except ValueError as error:
        raise ArtifactError(f"{path}: the artifact's metadata is not valid JSON ({error})") from None
    if not isinstance(data, dict) or data.get("schema") != METADATA_SCHEMA:
        raise ArtifactError(f"{path}: not a pytest_fullgraph artifact's metadata")
    if data.get("version") != METADATA_VERSION or data.get("runtime") not in RUNTIMES:
        raise ArtifactError(f"{path}: metadata version {data.get('version')!r} / runtime {data.get('runtime')!r} "
                            f"is not supported (this pytest_fullgraph reads version {METADATA_VERSION}, runtimes "
                            f"{', '.join(RUNTIMES)})")
    return data


def load_generate(path: str | Path) -> Callable[..., torch.Tensor]:
    """Load an artifact ``save_generate`` wrote: the same callable as ``export_generate`` returns,
    ``(input_ids, attention_mask) -> tokens``, trimmed like ``generate`` (a ``while`` program also takes
    ``max_new_tokens=``, up to the bound it was exported with).

    Refused with ``ArtifactError`` before anything runs: a missing or corrupted file, metadata of another format,
    a torch or transformers release other than the one that saved it; and, per call, inputs of other shapes or
    dtypes than those it was exported for.
    """
    artifact = Path(path)
    if not artifact.exists():  # said before the metadata beside it is looked for: the program is what is missing
        raise ArtifactError(f"{artifact}: no such artifact{_near(artifact)}; load_generate takes the path "
                            "save_generate returned, or a file --fullgraph-artifacts wrote")
    metadata = read_metadata(artifact)
    current = _versions()
    for package in ("torch", "transformers"):
        saved = str(metadata.get("versions", {}).get(package, "?"))
        if _release(saved) != _release(current[package]):
            raise ArtifactError(f"{artifact}: saved with {package} {saved}, this is {package} {current[package]}; "
                                "export and save it again with this version")
    missing = RUNTIMES[metadata["runtime"]].unavailable()
    if missing is not None:
        raise ArtifactError(f"{artifact}: a {metadata['runtime']} artifact {missing}")
    try:
        program = RUNTIMES[metadata["runtime"]].load(artifact)
    except Exception as error:  # a truncated zip, a foreign file: the loaders' errors vary, the cause does not
        raise ArtifactError(f"{artifact}: cannot load the {metadata['runtime']} artifact ({type(error).__name__}: "
                            f"{str(error).splitlines()[0] if str(error) else ''})") from None
    return _checked(program, metadata, str(artifact))


def _near(artifact: Path) -> str:
    """`` (did you mean ...?)`` with the artifacts beside a missing one whose names are close to its name."""
    suffixes = tuple(runtime.suffix for runtime in RUNTIMES.values())
    beside = [path.name for path in artifact.parent.iterdir()] if artifact.parent.is_dir() else []
    return did_you_mean(artifact.name, [name for name in beside if name.endswith(suffixes)])


def fits(shape: Sequence[int], ranges: list[list[int | None]]) -> bool:
    """Whether a tensor of ``shape`` is one the program takes (``ranges``: per dimension [smallest, largest])."""
    return len(shape) == len(ranges) and all(low is not None and low <= size and (high is None or size <= high)
                                             for size, (low, high) in zip(shape, ranges, strict=True))


def describe_shape(ranges: list[list[int | None]]) -> str:
    """(2, 8) for a fixed shape; (2.., 2..28) where dimensions range."""
    parts = [str(low) if low == high else f"{low}..{'' if high is None else high}" for low, high in ranges]
    return f"({', '.join(parts)})"


def _checked(program: RawProgram, metadata: dict[str, Any], source: str) -> Callable[..., torch.Tensor]:
    from pytest_fullgraph.loop.exported import UnsupportedGeneration, run_program

    expected = metadata["inputs"]
    loop = str(metadata.get("loop", "unrolled"))

    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int | None = None) -> torch.Tensor:
        for name, tensor in (("input_ids", input_ids), ("attention_mask", attention_mask)):
            ranges, dtype = expected[name]["shape"], expected[name]["dtype"]
            if input_ids.shape != attention_mask.shape or not fits(tensor.shape, ranges) or str(tensor.dtype) != dtype:
                raise ArtifactError(f"{source}: {name} is {tuple(tensor.shape)} {tensor.dtype}, but the program "
                                    f"takes {describe_shape(ranges)} {dtype} (input_ids and attention_mask alike)")
        try:
            return run_program(program, loop, int(metadata["max_new_tokens"]), input_ids, attention_mask,
                               max_new_tokens, metadata.get("noise"))
        except UnsupportedGeneration as error:  # a length the program does not take: refused before it runs
            raise ArtifactError(f"{source}: {error}") from None

    run.artifact_metadata = metadata  # type: ignore[attr-defined]
    return run
