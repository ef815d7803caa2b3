"""The second request, as data: each ``Variation`` a passing check's compiled object was called with again (another
prompt length, batch size, setting), whether that call recompiled and, when it did, the ``Guard``s that failed,
each with the code that installed it and whose code that is. No torch import: reports carry and render these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_fullgraph.core.results import BreakRecord

#: What a variation's call gave, besides a recompile: its tokens equal eager's, differ, or it could not run.
EQUAL, DIFFERENT, RECOMPILED, FAILED = "equal", "different", "recompiled", "failed"


@dataclass
class Guard:
    """One guard that failed on a variation's call: dynamo's words for it and where it was installed.

    ``file``/``line``/``function``/``source``: the code whose reading of a value installed the guard (its innermost
    user frame), or, for a guard on the compiled frame's own input (``tensor 'input_ids' size mismatch``), the
    compiled frame itself; ``origin``: whose code that is, by ``breaks.ORIGIN_RULES``."""

    guard: str
    file: str = ""
    line: int = 0
    function: str = ""
    source: str = ""
    origin: str = ""
    #: True for a guard on an input of the compiled frame (its shape or value), located at that frame
    on_input: bool = False

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "<unknown location>"

    def summary(self) -> str:
        installed = "on the input of the frame compiled at" if self.on_input else "installed at"
        return f"`{self.guard}` ({installed} {self.where()}, {self.origin or 'unknown origin'})"

    def as_break(self, message: str) -> BreakRecord:
        """A recompile a level promised not to make, as the break the check records at this guard."""
        from pytest_fullgraph.core.results import BreakRecord

        return BreakRecord("Recompile", "Recompile", None, message, self.file, self.line, self.function, self.source,
                           self.origin)


@dataclass
class Variation:
    """One further call of a passing check's compiled object: what changed, whether it recompiled, its tokens."""

    name: str
    #: what changed, in words: "prompt width 8 -> 11"
    change: str
    #: ``EQUAL``/``DIFFERENT`` (no recompile: the tokens judged), ``RECOMPILED`` (a guard failed: the call was
    #: stopped before compiling again) or ``FAILED`` (the call raised something else)
    result: str
    #: whether the level promises this variation runs without a recompile (a recompile then fails the check)
    promised: bool = False
    guards: list[Guard] = field(default_factory=list)
    #: where the tokens first differ, or why the call failed; "" otherwise
    detail: str = ""
    #: why a promised variation's recompile does not fail the check (transformers' own test excuses it), or ""
    excused: str = ""

    @property
    def recompiled(self) -> bool:
        return self.result == RECOMPILED

    @property
    def broken_promise(self) -> bool:
        return self.promised and self.recompiled and not self.excused

    def describe(self) -> str:
        """One line: ``prompt_length (prompt width 8 -> 11): recompiled, `guard` (installed at ...)``."""
        head = f"{self.name} ({self.change}): {self.result}"
        if self.guards:
            head += f", {self.guards[0].summary()}" + (f" and {len(self.guards) - 1} more" if len(self.guards) > 1
                                                        else "")
        if self.detail:
            head += f": {self.detail}"
        if self.excused:
            head += f" (excused: {self.excused})"
        return head

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Variation:
        fields = dict(data)
        fields["guards"] = [Guard(**guard) for guard in fields.get("guards", [])]
        return cls(**fields)
