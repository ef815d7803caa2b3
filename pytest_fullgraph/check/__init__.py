"""One check: its decision tree with no level-specific branch (``run``), its compiled phase (``compiled``) and the state
its phases share (``state``), the exact comparison and its explanation (``compare``), the table of scenarios
(``scenarios``) and a scenario's inputs for one model (``inputs``).

May import ``levels``, ``loop``, ``core`` and ``models``.
"""
