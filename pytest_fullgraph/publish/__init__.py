"""Many reports into pages: the findings page (``findings``) with its run's tables (``run_tables``), its provenance
line (``provenance``) and torch releases table (``releases``), drafts of upstream issues (``upstream``), and
collating CI's shard artifacts (``collate``). No torch.

May import ``report`` and torch-free parts of ``core``.
"""
