"""Holding back what transformers says while we list and build its model types: configs we shrink warn about
their own fields (a rope factor past the tiny positions, a special token id past the tiny vocabulary) and modeling
code offers optional kernels (an xIELU ``pip install git+...`` hint). They speak of our tiny configs, not of
anything a user did, so ``python -m pytest_fullgraph models`` counts them instead of printing them.

Only transformers' own logger and warnings raised from the libraries the walk runs are held, and only inside the
block: a warning from a user's file (a registered model's build) is shown as it would have been.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: The logger every ``transformers.*`` logger hands its records to.
TRANSFORMERS_LOGGER = "transformers"
#: Packages whose warnings the walk holds: transformers, the torch it runs and our own builders.
HELD_PACKAGES = ("transformers", "torch", "pytest_fullgraph")


@dataclass
class Held:
    """What a block held back: transformers' log records and the libraries' Python warnings, a line each."""

    lines: list[str] = field(default_factory=list)


class _Keeper(logging.Handler):
    def __init__(self, held: Held) -> None:
        super().__init__(logging.NOTSET)
        self.held = held

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.held.lines.append(f"[{record.name}] {record.getMessage()}")
        except Exception:  # a record whose arguments do not fit its message: logging's own report of it
            self.handleError(record)


@contextlib.contextmanager
def held_transformers_output(hold: bool = True) -> Iterator[Held]:
    """Inside the block, transformers' log records (at its logger's own level) and warnings raised from
    ``HELD_PACKAGES`` are kept in the yielded ``Held`` instead of printed; ``hold=False`` (``--verbose``) changes
    nothing. The logger's handlers and propagation are put back on leaving, whatever happened."""
    held = Held()
    if not hold:
        yield held
        return
    import transformers.utils.logging  # noqa: F401  (transformers' own handler is in place before it is set aside)

    logger = logging.getLogger(TRANSFORMERS_LOGGER)
    handlers, propagate = logger.handlers[:], logger.propagate
    logger.handlers[:], logger.propagate = [_Keeper(held)], False
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            yield held
    finally:
        logger.handlers[:], logger.propagate = handlers, propagate
        _sort_warnings(caught, held)


def _sort_warnings(caught: list[warnings.WarningMessage], held: Held) -> None:
    """Keep the libraries' warnings; show the others (a user's) as Python would have."""
    roots = _package_roots()
    for warning in caught:
        if any(Path(warning.filename).resolve().is_relative_to(root) for root in roots):
            held.lines.append(f"{warning.category.__name__}: {warning.message}")
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno,
                                 warning.file, warning.line)


def _package_roots() -> list[Path]:
    """The folders of the held packages that are imported (one that is not raised nothing)."""
    files = [getattr(sys.modules.get(name), "__file__", None) for name in HELD_PACKAGES]
    return [Path(file).resolve().parent for file in files if file]
