"""A reproducer of a model whose class transformers does not export (a conftest's subclass, a project's own model):
which classes a script imports from their files, the function that imports a file by its path (with a stand-in for
its imports of pytest_fullgraph, which only register the model), and how the header says what the script needs.
No torch import here; transformers only where a class is looked up.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_fullgraph.core.model_facts import project_file

#: Imports a project's file by its path (a class transformers does not export: a conftest's model)
_PLAIN = '''def project_module(path):  # the file that defines the model's class, imported from its path
    spec = importlib.util.spec_from_file_location("project", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
'''
#: The same, for a file that imports pytest_fullgraph to register its model: those names do nothing here
_STAND_IN = '''def project_module(path):  # the file that defines the model's class, imported from its path;
    # what it imports from pytest_fullgraph (to register the model with the suite) is a stand-in that does nothing
    spec = importlib.util.spec_from_file_location("project", path)
    module, real = importlib.util.module_from_spec(spec), sys.modules.get("pytest_fullgraph")
    sys.modules["pytest_fullgraph"] = stand_in = types.ModuleType("pytest_fullgraph")
    stand_in.__getattr__ = no_op
    try:
        spec.loader.exec_module(module)
    finally:  # as it was (the suite also tries scripts in its own process)
        sys.modules.pop("pytest_fullgraph")
        sys.modules.update({"pytest_fullgraph": real} if real else {})
    return module

def no_op(name):  # each name the file takes from pytest_fullgraph: a function that does nothing
    if name.startswith("__"):  # a module's own attributes, which inspect looks up: absent
        raise AttributeError(name)
    return lambda *args, **kwargs: None
'''


def loader(stand_in: bool) -> str:
    """The script's ``project_module(path)``: with ``stand_in``, a file's imports of pytest_fullgraph do nothing."""
    return _STAND_IN if stand_in else _PLAIN


def module_names(project: dict[str, str]) -> dict[str, str]:
    """The variable that holds each project file's module: ``project``, or ``project1``, ``project2``, ..."""
    files = list(dict.fromkeys(project.values()))
    return {path: "project" if len(files) == 1 else f"project{index}" for index, path in enumerate(files, 1)}


def needs(project: dict[str, str], stand_in: bool) -> str:
    """What a script needs, for its header: torch and transformers, and the project's classes with their files."""
    if not project:
        return "torch and transformers only"
    by_file: dict[str, list[str]] = {}
    for name, path in sorted(project.items()):
        by_file.setdefault(path, []).append(name)
    classes = " and ".join(f"the class{'es' * (len(names) > 1)} {' and '.join(names)} from {path}"
                           for path, names in by_file.items())
    taken = " (a stand-in takes its imports of pytest_fullgraph, which register the model)"
    return f"needs torch, transformers and {classes}{taken if stand_in else ''}"


def project_classes(classes: Iterable[type]) -> dict[str, str] | str:
    """The classes transformers does not export, by name, with the file a script imports each from (the file the
    report records as ``model_file``); or why a script cannot import one."""
    import transformers

    found: dict[str, str] = {}
    for klass in classes:
        if getattr(transformers, klass.__name__, None) is klass:
            continue
        package = klass.__module__.partition(".")[0]
        if package == "transformers":
            return (f"{klass.__name__} cannot be imported from transformers' top level ({klass.__module__}), so a "
                    "script cannot rebuild the model")
        if package == __name__.partition(".")[0]:
            return (f"{klass.__name__} is pytest_fullgraph's own ({klass.__module__}): a script needs torch and "
                    "transformers only")
        path = project_file(klass)
        if not path:
            return (f"{klass.__name__} is not in transformers, and Python cannot say which file defines it, so a "
                    "script cannot rebuild the model")
        if klass.__qualname__ != klass.__name__:
            inside = klass.__qualname__.rpartition(".")[0].replace(".<locals>", "")
            return (f"{klass.__name__} is defined inside {inside} in {path}: a script imports a class from the top "
                    "level of its file")
        found[klass.__name__] = path
    return found

