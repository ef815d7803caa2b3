"""One check: its decision tree with no level-specific branch (``run``), the exact comparison and its explanation
(``compare``), the table of scenarios (``scenarios``) and a scenario's inputs for one model (``inputs``).

May import ``levels``, ``loop``, ``core`` and ``models``.
"""
