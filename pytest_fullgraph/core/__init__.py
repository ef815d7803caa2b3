"""The shared vocabulary every other package speaks: outcomes and result types (``results``), breaks located and
classified (``breaks``) with PyTorch's help for them (``break_help``, ``break_advice``), what a compile reports
(``compile_events``), ``generate`` as the checks call it (``generation``), what the checks ask of a model
(``model_facts``), the conditions a check runs under (``compute``), ``timer``, the run's ``environment`` and name
suggestions (``suggest``).

Imports nothing of pytest_fullgraph outside ``core``.
"""
