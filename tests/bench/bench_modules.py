"""bench/'s commands as modules for the tests: bench/ is scripts, not a package, and they import bench/raw.py as
``raw``, so it is on ``sys.path`` while one loads; each is registered in ``sys.modules`` (a dataclass looks its
module up there)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests import REPOSITORY

BENCH = REPOSITORY / "bench"


def bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module
