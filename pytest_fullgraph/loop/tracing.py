"""What the ``while`` form needs to be traced by every supported dynamo: write-isolated stand-ins for objects a
step changes (``view``), and side effects of transformers' and ``kernels``' wrappers lifted while the loop is
traced (``traceable_loop``), with Python's own ``min``/``max`` for non-strict export (``python_min_max``); and
``run_while``, the one place the ``while`` forms call ``while_loop`` (``traced``: whether to).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from pytest_fullgraph.core.generation import UnsupportedGeneration


def _kernel_routers(model: Any) -> dict[Any, Any]:
    """The classes (with their wrapped ``forward``) whose instances in ``model`` route kernel functions per call.

    transformers 5.25 decorates modules (attention, short convolutions) with the ``kernels`` package's
    ``use_kernelized_func``: the instance gets ``_kernel_funcs`` and the class a ``forward`` named ``new_forward``
    that sets a context variable (a global attribute while compiling) around the real forward.
    """
    routers: dict[Any, Any] = {}
    for module in model.modules():
        funcs = module.__dict__.get("_kernel_funcs")
        if funcs is None:
            continue
        owner = next(cls for cls in type(module).__mro__ if "forward" in cls.__dict__)
        if _unrouted(owner.__dict__["forward"]) is owner.__dict__["forward"]:
            continue
        kernelized = sorted(name for name, func in funcs.items() if "forward" in vars(func))
        if kernelized:
            raise UnsupportedGeneration(
                f"loop='while' cannot run {type(module).__name__} with kernels.kernelize()'d functions "
                f"({', '.join(kernelized)}): their per-call routing sets a context variable, a side effect a "
                "while_loop body cannot hold; use loop='unrolled'")
        routers[owner] = owner.__dict__["forward"]
    return routers


def run_while(condition: Callable[..., Any], body: Callable[..., tuple[Any, ...]],
              carried: tuple[Any, ...]) -> tuple[Any, ...]:
    """``while_loop(condition, body, carried)`` when compiled or exported; run uncompiled, the same body in a
    Python loop.

    Uncompiled, ``while_loop`` itself captures its body with dynamo on every call (seconds per call) and fails
    wherever compiling fails, so the loop's eager run, the reference a compiled run is judged against, would
    depend on the compiler. In Python the eager run is the loop's own arithmetic; whether its body can be
    captured is then a compile outcome, met where the loop is compiled.
    """
    if traced():
        from torch._higher_order_ops import while_loop

        return tuple(while_loop(condition, body, carried))
    while bool(condition(*carried)):
        carried = tuple(body(*carried))
    return carried


def traced() -> bool:
    """Whether the loop is being compiled or traced (for export): control flow on data must then be an operator
    (``while_loop``, ``cond``); run eagerly, Python's own is the loop's plain arithmetic."""
    import torch

    return torch.compiler.is_compiling() or _tracing()


def _tracing() -> bool:
    """Whether a tracer other than dynamo is recording the calls (``make_fx``, a fake-tensor mode)."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    return get_proxy_mode() is not None or detect_fake_mode() is not None


def _unrouted(forward: Any) -> Any:
    """``forward`` without the routing wrappers around it (one per decoration; they may stack)."""
    while getattr(forward, "__code__", None) is not None and forward.__code__.co_name == "new_forward" \
            and hasattr(forward, "__wrapped__"):
        forward = forward.__wrapped__
    return forward


class _IdleCollector:
    """transformers' output collector (``utils.output_capturing._active_collector``) for forwards that collect
    nothing, as the loop's always do (it refuses ``output_hidden_states`` and ``output_attentions``).

    Every decorated forward sets the collector and resets it after, which writes the attributes of a module-level
    object: a side effect torch 2.11's ``while_loop`` body refuses (GB0067, "Attempted to mutate
    CompileableContextVar"). With nothing to collect, the hooks read nothing, so the stand-in skips the writes;
    a forward that does ask for outputs still goes to the real collector (and its write is refused, by name).
    """

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    def get(self) -> Any:
        return None  # only empty collections were set here: the hooks have nothing to record

    def set(self, value: Any) -> Any:
        return self.collector.set(value) if value else _IDLE

    def reset(self, token: Any) -> None:
        if token is not _IDLE:
            self.collector.reset(token)


_IDLE = object()


@contextlib.contextmanager
def output_collector_idle(loop: str) -> Iterator[None]:
    """For the ``while`` form, transformers' output collector replaced by ``_IdleCollector``; restored on exit."""
    try:
        from transformers.utils import output_capturing
    except ImportError:  # a release without it has nothing to lift
        yield
        return
    collector = getattr(output_capturing, "_active_collector", None)
    if loop != "while" or collector is None:
        yield
        return
    output_capturing._active_collector = _IdleCollector(collector)  # type: ignore[assignment]
    try:
        yield
    finally:
        output_capturing._active_collector = collector


#: Python's own ``min`` and ``max``, as this module found them on import.
_PYTHON_MIN_MAX = (builtins.min, builtins.max)


@contextlib.contextmanager
def python_min_max() -> Iterator[None]:
    """Python's ``min`` and ``max`` while a ``while`` program is exported without strictness.

    Non-strict export replaces the builtins with a wrapper of its own that dynamo, tracing the loop's body,
    refuses: torch 2.9 as "marked as skipped" (``_tensor_min_max``), 2.15.0 as "op min not reachable in operator
    or builtins"; every processor that calls ``min`` (top-k) broke the exported ``while`` form. The body is
    traced, so dynamo handles the real builtins itself; when nothing replaced them (other releases, or strict
    export, where this runs under dynamo) nothing changes.
    """
    replaced = (builtins.min, builtins.max)
    if replaced == _PYTHON_MIN_MAX:
        yield
        return
    builtins.min, builtins.max = _PYTHON_MIN_MAX
    try:
        yield
    finally:
        builtins.min, builtins.max = replaced


@contextlib.contextmanager
def traceable_loop(model: Any, loop: str, others: tuple[Any, ...] = ()) -> Iterator[None]:
    """What the ``while`` form lifts while it is traced: the kernel routing wrapper of the model and of the
    ``others`` it runs (a draft model), and the output collector's writes (see both); nothing for the unrolled
    form."""
    with contextlib.ExitStack() as stack:
        for each in (model, *others):
            stack.enter_context(kernel_routing_lifted(each, loop))
        stack.enter_context(output_collector_idle(loop))
        yield


@contextlib.contextmanager
def kernel_routing_lifted(model: Any, loop: str) -> Iterator[None]:
    """For the ``while`` form, run modules' own ``forward`` instead of the ``kernels`` routing wrapper around it.

    The wrapper's context-variable write is a side effect that a ``while_loop`` body refuses (``HOP: Unsafe side
    effect``, GB0067), so on transformers 5.25 every model's while form broke in its attention. When no function
    was kernelized (checked: ``_kernel_routers`` refuses otherwise) the routing picks each function's reference
    implementation, which the wrapped forward calls anyway, so lifting the wrapper changes no token. The classes
    are restored on exit; the unrolled form, whose side effects dynamo replays, is left as it is.
    """
    routers = _kernel_routers(model) if loop == "while" else {}
    for owner, forward in routers.items():
        owner.forward = _unrouted(forward)
    try:
        yield
    finally:
        for owner, forward in routers.items():
            owner.forward = forward


class _View:
    """A stand-in for an object inside a traced step: attribute reads fall through to the original, writes stay
    on the stand-in. What ``copy.copy`` gives, in a form every supported dynamo traces: torch 2.11 marks
    ``copy.copy`` as skipped and cannot list an object's attributes (``vars(obj).items()``, GB0156)."""

    def __init__(self, original: Any) -> None:
        self._original = original

    def __getattr__(self, name: str) -> Any:
        if name == "_original":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._original, name)


#: The stand-in class of each class, made on the host: dynamo cannot create a class inside a graph.
_VIEW_CLASSES: dict[type, type] = {}


def prepare_views(*objects: Any) -> None:
    """Make the stand-in classes ``view`` will need for ``objects``, before tracing (on the host)."""
    for obj in objects:
        cls = type(obj)
        if cls not in _VIEW_CLASSES:
            # the same name: messages and name-keyed tables read the stand-in as the class it stands for
            _VIEW_CLASSES[cls] = type(cls.__name__, (_View, cls), {"__qualname__": cls.__qualname__,
                                                                    "__module__": cls.__module__})


def view(obj: Any) -> Any:
    """A write-isolated stand-in for ``obj`` (see ``_View``); its class must come from ``prepare_views``, which
    is called here too when run eagerly."""
    if type(obj) not in _VIEW_CLASSES:
        prepare_views(obj)
    return _VIEW_CLASSES[type(obj)](obj)
