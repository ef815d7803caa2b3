"""Many reports into pages: the findings page (``findings``) with its provenance line (``provenance``) and torch
releases table (``releases``), drafts of upstream issues (``upstream``), and collating CI's shard artifacts
(``collate``). No torch.

May import ``report`` and torch-free parts of ``core``.
"""
