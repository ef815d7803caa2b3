"""Dynamo loses an attribute first set after a ``torch.cond`` on an object made in the traced frame.

Found by pytest_fullgraph (torch 2.13.0): a transformers cache layer made before the loop's first ``torch.cond``
sets its sizes lazily on its first update, after the cond; under ``torch.compile(fullgraph=True)`` and strict
``torch.export`` reading them raises ``AttributeError`` ("'StaticLayer' object has no attribute 'batch_size'"),
which eager code never does. It takes an object that already has an attribute when the cond runs: an object with
none, or an attribute set again (not first set) after the cond, traces fine.

Needs only torch. Exit 1 and "BUG: ..." while dynamo loses the attribute; exit 0 and "FIXED: ..." once it does not;
exit 2 and "OTHER: ..." on any other failure.
"""

import sys

import torch


class Layer:
    batch_size: int  # declared, not set: set on first use, as transformers' cache layers do

    def __init__(self) -> None:
        self.kind = "static"  # an attribute before the cond: without one the bug does not show


def step(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    layer = Layer()
    t = torch.cond(k > 0, lambda: x + 1, lambda: x - 1)
    layer.batch_size = x.shape[0]  # first set after the cond, as a lazily initialised cache layer does
    return t * layer.batch_size


class Step(torch.nn.Module):
    def forward(self, x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return step(x, k)


def main() -> int:
    x, k = torch.ones(3), torch.tensor(1)
    expected = step(x, k)
    lost = []
    for how, run in (("torch.compile(fullgraph=True)", lambda: torch.compile(step, fullgraph=True, backend="eager")),
                     ("strict torch.export", lambda: torch.export.export(Step(), (x, k), strict=True).module())):
        torch._dynamo.reset()
        try:
            got = run()(x, k)
        except Exception as error:  # dynamo wraps the AttributeError it observed
            chain = [error, error.__cause__, error.__context__]
            if any("has no attribute 'batch_size'" in str(link) for link in chain if link is not None):
                lost.append(how)
                continue
            print(f"OTHER: {how} failed otherwise: {type(error).__name__}: {str(error).splitlines()[0]}")
            return 2
        if not torch.equal(got, expected):
            print(f"OTHER: {how} gave {got.tolist()}, eager {expected.tolist()}")
            return 2
    if lost:
        verb = "lose" if len(lost) > 1 else "loses"
        print(f"BUG: torch {torch.__version__}: {' and '.join(lost)} {verb} Layer.batch_size, first set after a "
              "torch.cond on an object made before it (AttributeError); eager code reads it")
        return 1
    print(f"FIXED: torch {torch.__version__}: both read the attribute set after the cond")
    return 0


if __name__ == "__main__":
    sys.exit(main())
