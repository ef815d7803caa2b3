"""Standalone reproducers: for each failing check of a report, a Python file that needs only torch and transformers
(and, for a model of a project's own, the file of its class), shrunk while it fails the same way and run in a fresh
process before it is written (``python -m pytest_fullgraph repro``). A maintainer runs a script; they do not install
a pytest plugin to look at a bug.

``plan`` decides from a ``CheckResult`` alone which script shows its failure and what that failure must be (no
torch); ``source`` writes the script's text (no torch) from the pieces in ``snippets``, ``project`` its part for a
class transformers does not export; ``case`` rebuilds the check's model, inputs and generation config through the
registry; ``reduce`` shrinks them, trying each smaller script in this process; ``verify`` runs a script in a fresh,
isolated process; ``command`` ties them together and writes the index.

May import ``check``, ``report``, ``models`` and ``core``.
"""
