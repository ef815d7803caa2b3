"""The levels a check runs at: the ``Level`` interface and its registry (``base``), why ``generate`` compiled
nothing when a graph rule finds so (``auto_compile``), the built-in levels (``builtin``), transformers' own export
paths as levels (``hf``, ``hf_export``), and the saved artifacts and runtimes an exported generation runs on
(``artifacts``, ``executorch_runtime``).

May import ``loop``, ``core`` and ``models``.
"""
