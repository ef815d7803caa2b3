"""Repository-root conftest: the plugin itself comes from the installed entry point.

Kept deliberately empty of hooks so that `pytest` here behaves exactly as it does for users who
install pytest_fullgraph into their own projects.
"""
