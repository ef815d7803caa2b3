"""The levels a check runs at: the ``Level`` interface and its registry (``base``), the built-in levels
(``builtin``), transformers' own export paths as levels (``hf``, ``hf_export``), and the saved artifacts and
runtimes an exported generation runs on (``artifacts``, ``executorch_runtime``).

May import ``loop``, ``core`` and ``models``.
"""
