"""The decoding modes beyond greedy and sampling, one module each behind one table (``table``: each mode's row,
``Mode``, declared by its module): beam search (``beam``, its step in ``beam_search``), prompt lookup (``lookup``)
and assisted decoding (``assisted``), whose draft-and-verify loop is written once (``drafting``) with speculative
sampling's draws (``speculative``).

May import ``loop`` and ``core``.
"""
