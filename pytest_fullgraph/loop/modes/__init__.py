"""The decoding modes beyond greedy and sampling, one module each: beam search (``beam``, ``beam_search``), prompt
lookup (``lookup``), assisted decoding (``assisted``) and the draft-and-verify step they share (``speculative``).

May import ``loop`` and ``core``.
"""
