"""Advice for every break site, whether or not it has a GB id: PyTorch's help for its GB id where the run stored
it (``break_help``); else the advice PyTorch's own message gives (its "Consider ..." sentences, what the rest of a
data-dependent guard's message says) with the page PyTorch's user-error documentation has for that error; else
what to look at for a break of that kind, in our words. A ``UserError`` ("Could not guard on data-dependent
expression ...") has no GB id, and it is the one break of ``generate`` in the main command.

Reads only what a report holds (a break's type, GB id and message), so renderings advise without torch. The words
quoted from PyTorch come from torch 2.13's source, named beside each.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_fullgraph.core.break_help import BreakHelp, docs_url, hint_text
from pytest_fullgraph.core.results import BreakRecord

#: Where an advice's words come from, as the renderings name it.
REGISTRY, MESSAGE, DOCS, KIND = "registry", "message", "docs", "kind"
SOURCES = {REGISTRY: "PyTorch's help for its GB id", MESSAGE: "PyTorch's message",
           DOCS: "PyTorch's documentation of the error", KIND: "pytest_fullgraph, by the break's kind"}

#: A sentence of PyTorch's message that tells the reader what to do.
_ADVICE = re.compile(r"^(?:consider|try|to avoid|to fix|please|you (?:can|may|should|could)|hint:)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_URL = re.compile(r"https?://\S+[^\s.,;)]")
#: ``torch._dynamo.exc.exportdb_error_message``: the page a ``UserError`` raised with a ``case_name`` links.
EXPORTDB = "https://pytorch.org/docs/main/generated/exportdb/index.html#{case}"


@dataclass(frozen=True)
class CutAdvice:
    """A PyTorch message whose record kept its first line only (``breaks.break_message``), with what the rest of
    it says to do and the ``case_name`` its ``UserError`` links (its documentation page)."""

    pattern: re.Pattern[str]
    advice: str
    case: str


#: The messages PyTorch raises for a guard on a value read from a tensor's data
#: (``ShapeEnv._make_data_dependent_error`` in ``torch/fx/experimental/symbolic_shapes.py``), each re-raised as a
#: ``UserError`` with ``case_name="constrain_as_size_example"`` (``_dynamo/variables/tensor.py``,
#: ``_dynamo/utils.py``, ``export/_trace.py``).
CUT_ADVICE = (
    CutAdvice(re.compile(r"Could not guard on data-dependent expression"),
              "consider using data-dependent friendly APIs such as guard_or_false, guard_or_true and "
              "statically_known_true.", "constrain_as_size_example"),
    CutAdvice(re.compile(r"Could not extract specialized integer from data-dependent expression"), "",
              "constrain_as_size_example"),
)

#: What to look at, by the break's exception type (its last dotted part), when PyTorch says nothing more.
KIND_HINTS = {
    "UserError": "Dynamo refuses code that runs eagerly (a user error, `torch._dynamo.exc.UserErrorType`): the "
                 "statement at the site is what to change; the message says what dynamo could not follow.",
    "Unsupported": "Dynamo cannot trace the statement at the site; the message says what it met.",
    "UncapturedHigherOrderOpError": "A higher-order op (`torch.cond`, `while_loop`) dynamo could not capture whole: "
                                    "fix the break inside it.",
    "FailOnRecompileLimitHit": "The frame recompiled until dynamo's limit: the message names the last guard that "
                               "failed and where it was installed, the check's recompile reasons every one.",
    "Recompile": "A second request recompiled where its level promises none: the guard says which value the compiled "
                 "code was specialized on and the site where it was read; mark a size dynamic "
                 "(`torch._dynamo.mark_dynamic`) or keep the value in a tensor rather than a Python number.",
    "InternalTorchDynamoError": "PyTorch failed in its own code while tracing the statement at the site: a PyTorch "
                                "bug; `python -m pytest_fullgraph repro REPORT CHECK` writes a script to report.",
    "PendingUnbackedSymbolNotFound": "PyTorch lost track of a value read from a tensor's data while tracing the "
                                     "statement at the site: a PyTorch bug; `python -m pytest_fullgraph repro "
                                     "REPORT CHECK` writes a script to report.",
    "BackendCompilerFailed": "The backend failed on the captured graph, not dynamo on the code: the error inside "
                             "the message is the backend's.",
}
OTHER_KIND = ("An exception, not a graph break PyTorch documents: its message and the statement at the site say "
              "what failed.")


@dataclass(frozen=True)
class Advice:
    """What to do about a break site: the words, where they come from (``SOURCES``) and a page to read, or ""."""

    text: str
    source: str
    url: str = ""

    def line(self) -> str:
        """One line for the terminal: PyTorch's help for a GB id as before; other advice says where it is from."""
        origin = "" if self.source == REGISTRY else f" ({SOURCES[self.source]})"
        return f"{self.text}{origin} {self.url}".rstrip()


def advise(record: BreakRecord, help_by_id: Mapping[str, BreakHelp]) -> Advice:
    """Advice for ``record``: the GB id's stored help, else the break inside it (a higher-order op's news), else
    PyTorch's message, else the break's kind."""
    found = help_by_id.get(record.gb_id or "")
    if found is not None:
        return Advice(hint_text(found) or found.explanation, REGISTRY, found.url)
    if record.cause is not None:
        return advise(record.cause, help_by_id)
    return from_message(record.exception or record.gb_type, record.message) or by_kind(record)


def from_message(exception: str, message: str) -> Advice | None:
    """PyTorch's advice in ``message`` (its advising sentences, what the cut rest says) with a documentation link
    (one in the message, else the page its ``UserError`` links); None when it gives neither."""
    sentences = [sentence.strip() for sentence in _SENTENCE_END.split(message) if _ADVICE.match(sentence.strip())]
    url_found = _URL.search(message)
    url = url_found.group(0) if url_found else ""
    for cut in CUT_ADVICE:
        if cut.pattern.search(message):
            sentences += [cut.advice] if cut.advice else []
            if not url and exception.rpartition(".")[2] == "UserError":
                url = EXPORTDB.format(case=cut.case.replace("_", "-"))
    if sentences:
        return Advice(" ".join(_capitalised(sentence) for sentence in dict.fromkeys(sentences)), MESSAGE, url)
    return Advice("PyTorch documents this error.", DOCS, url) if url else None


def by_kind(record: BreakRecord) -> Advice:
    """What to look at for a break of ``record``'s kind; a GB id without stored help still links its page."""
    kind = (record.exception or record.gb_type).rpartition(".")[2]
    return Advice(KIND_HINTS.get(kind, OTHER_KIND), KIND, docs_url(record.gb_id) if record.gb_id else "")


def _capitalised(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]
