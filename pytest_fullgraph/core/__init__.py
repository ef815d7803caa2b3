"""The shared vocabulary every other package speaks: result types (``results``) spelled in ``outcomes``, with where
two runs differ (``mismatch``) and how a message quotes an exception (``messages``); breaks located (``frames``) and
classified (``breaks``) with PyTorch's help for them (``break_help``, ``break_advice``), what a compile reports
(``compile_events``), ``generate`` as the checks call it (``generation``), what the checks ask of a model
(``model_facts``), the conditions a check runs under (``compute``), ``timer``, the run's ``environment`` and name
suggestions (``suggest``).

May import nothing of pytest_fullgraph outside ``core``.
"""
