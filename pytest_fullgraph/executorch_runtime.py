"""A whole exported generation as an ExecuTorch program (``.pte``), run by ExecuTorch's own runtime.

Two rows of ``artifacts.RUNTIMES`` use it: ``executorch`` (XNNPACK delegate, what an ExecuTorch app on a phone or
a laptop CPU runs) and ``executorch_portable`` (ExecuTorch's portable kernels only, no delegate). What ExecuTorch
cannot take is refused before the minute-long lowering starts, in one line, from the program's metadata:

- the ``while`` form: ExecuTorch's emitter rejects ``torch.ops.higher_order.while_loop`` (measured with executorch
  1.5.1), so only the unrolled form is a row's loop form;
- sampling that draws inside the program: ``aten.multinomial`` is not a core ATen operator and ExecuTorch has
  no random number generator, so a sampling program must take its noise as an input (``noise_input=True``,
  ``sampling_noise``), drawn on the host as ``generate`` draws it;
- an unbounded dimension: ExecuTorch plans every buffer for the largest shape, so a dynamic export needs
  ``max_batch_size`` (its prompt length is bounded by ``max_prompt_length`` already).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.export import ExportedProgram


def refusal(metadata: dict[str, Any]) -> str | None:
    """Why ExecuTorch cannot take the program ``metadata`` describes, or None (whether the package is installed is
    the runtime row's ``requires``)."""
    if metadata.get("generation_config", {}).get("do_sample") and not metadata.get("noise"):
        return ("takes a sampling program only with its noise as an input: aten.multinomial is not a core ATen "
                "operator and ExecuTorch's runtime has no random number generator; export with "
                "export_generate(..., noise_input=True)")
    unbounded = [name for name, spec in metadata.get("inputs", {}).items()
                 if any(high is None for _, high in spec["shape"])]
    if unbounded:
        return (f"plans memory for the largest shape, and {', '.join(unbounded)} has no upper bound: export with "
                "export_generate(..., dynamic=True, max_batch_size=N), or dynamic=False")
    return None


def write(program: ExportedProgram, path: Path, *, delegate: bool) -> None:
    """Lower ``program`` to edge dialect, delegate what XNNPACK takes when ``delegate``, and write the ``.pte``."""
    from executorch.exir import to_edge_transform_and_lower

    partitioners: list[Any] = []
    if delegate:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioners.append(XnnpackPartitioner())
    lowered = to_edge_transform_and_lower(program, partitioner=partitioners).to_executorch()
    path.write_bytes(lowered.buffer)


def load(path: Path) -> Any:
    """The ``.pte``'s ``forward`` method in ExecuTorch's runtime, called as the program: tensors in, a tuple out."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")
    if method is None:
        raise ValueError("the program has no forward method")
    return lambda *inputs: tuple(method.execute(list(inputs)))
