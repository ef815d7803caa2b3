"""How a check's message quotes an exception: its first line, and the notes our diagnosis added to it. Shared by
every package that writes a message from someone else's exception. No torch import.
"""

from __future__ import annotations


def first_line(text: object) -> str:
    """The first non-blank line of a message or exception, stripped; "" when there is none."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def add_note(error: BaseException, note: str) -> None:
    """Our diagnosis on someone else's exception, its traceback (and so its site) kept; ``add_note`` of Python
    3.11, written so 3.10 has it too."""
    vars(error)["__notes__"] = [*getattr(error, "__notes__", []), note]


def summary(error: BaseException) -> str:
    """An exception's first line and the notes our code added to it: what a report's message shows."""
    notes = [first_line(note) for note in getattr(error, "__notes__", ())]
    head = first_line(error)
    if notes:  # the note says what the first line's dump meant ("... tree spec:", "Real spec TreeSpec(...)")
        head = head.rstrip(":") if len(head) <= _LONGEST_HEAD else f"{head[:_LONGEST_HEAD].rstrip()} ..."
    return "; ".join(part for part in (head, *notes) if part)


#: how much of an exception's first line a message keeps when our note explains it
_LONGEST_HEAD = 160
