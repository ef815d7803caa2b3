"""The conformance suite, shipped in the package as ``pytest_fullgraph.suite`` (see pyproject's package-dir).

With the plugin installed, ``pytest --fullgraph-models=...`` collects it from any directory; in this
repository ``testpaths`` points here too, and pytest collects the same directory once.
"""
