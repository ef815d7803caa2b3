"""The models under test: the registry of ``ModelSpec``s and its selection by names, keywords, glob patterns and tags
(``registry``), filled with every transformers model type as a tiny, seeded causal LM built without downloads and
with the models a conftest registers (``registration``).

How a model type is made tiny is in ``build``; the data behind it in ``shrink`` (the generic shrink) and ``tiny``
(one record per model type); the tags derived from configs in ``tags``. This ``__init__`` offers the names that
users and the other packages import from ``pytest_fullgraph.models``.

May import ``core`` only.
"""

from __future__ import annotations

from pytest_fullgraph.models.build import (
    DEFAULT_SEED,
    MAX_TINY_PARAMETERS,
    TooLargeToBuild,
    build_tiny,
    class_facts,
    count_parameters,
    installed_model_types,
    tiny_config,
    tiny_config_kwargs,
)
from pytest_fullgraph.models.registration import (
    builtin_registry,
    close_registrations,
    forget_external_models,
    register_model,
    session_registry,
    tiny_spec,
)
from pytest_fullgraph.models.registry import REGISTRATION_HINT, ModelSpec, Registry

__all__ = [
    "DEFAULT_SEED",
    "MAX_TINY_PARAMETERS",
    "REGISTRATION_HINT",
    "ModelSpec",
    "Registry",
    "TooLargeToBuild",
    "build_tiny",
    "builtin_registry",
    "class_facts",
    "close_registrations",
    "count_parameters",
    "forget_external_models",
    "installed_model_types",
    "register_model",
    "session_registry",
    "tiny_config",
    "tiny_config_kwargs",
    "tiny_spec",
]
