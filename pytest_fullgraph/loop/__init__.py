"""Our single-graph generation loop: ``generate``'s arguments as a plan (``planning``), the loop in its unrolled
and ``while_loop`` forms (``decode``), its steps, carried state, logits processors and tracing aids (``steps``,
``state``, ``processors``, ``tracing``, ``sampling_noise``), and the exported program's edges (``exported``).
Each decoding mode beyond greedy and sampling lives in ``modes``, behind its table (``modes.table``), which the
entry points dispatch through.

May import ``core`` only.
"""
