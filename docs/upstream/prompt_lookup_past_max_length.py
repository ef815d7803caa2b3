"""Prompt-lookup decoding drafts past ``max_length``, so it fails at a learned position table's end (transformers 5.24).

Found by pytest_fullgraph: ``PromptLookupCandidateGenerator.get_candidates`` bounds a draft's end by the sequence
(``min(end, input_length, max_length)``) but not by the room left before ``max_length``, unlike
``AssistedCandidateGenerator``, which drafts at most ``max_length - input_length - 1`` tokens ("the target model
generates one extra token"). The target then reads the whole draft, positions up to ``input_length + draft - 1``;
``generate`` cuts the kept tokens at ``max_length`` afterwards, so on rotary models nothing shows. A model with a
learned position table (gpt2, opt) holds ``max_position_embeddings`` rows, and ``max_new_tokens`` that fill them
(which ``generate`` allows, and plain greedy runs) fail with "IndexError: index out of range in self".

Needs only torch and transformers, no download (a tiny random gpt2 with 16 positions, an 8-token prompt, 8 new
tokens). Exit 1 and "BUG: ..." while a draft reaches past ``max_length``; exit 0 and "FIXED: ..." once none does
and the generation runs; exit 2 and "OTHER: ..." otherwise.
"""

import sys
from typing import Any

import torch
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

POSITIONS, NEW_TOKENS = 16, 8
PROMPT = torch.tensor([[5, 9, 14, 3, 27, 8, 11, 6]])


def main() -> int:
    import transformers

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_positions=POSITIONS, n_embd=32, n_layer=2, n_head=2, vocab_size=64)).eval()
    config = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0, eos_token_id=None)
    greedy = model.generate(PROMPT, generation_config=config)  # fills the table: generate allows it
    drafts: list[tuple[int, int]] = []  # (tokens so far, tokens drafted)
    original = PromptLookupCandidateGenerator.get_candidates

    def recorded(self: Any, input_ids: torch.Tensor, **kwargs: Any) -> Any:
        candidates, logits = original(self, input_ids, **kwargs)
        drafts.append((int(input_ids.shape[1]), int(candidates.shape[1] - input_ids.shape[1])))
        return candidates, logits

    PromptLookupCandidateGenerator.get_candidates = recorded  # type: ignore[method-assign]
    config.prompt_lookup_num_tokens = 3
    max_length = PROMPT.shape[1] + NEW_TOKENS
    try:
        looked_up = model.generate(PROMPT, generation_config=config)
        error = ""
    except IndexError as raised:
        looked_up, error = None, f"IndexError: {raised}"
    finally:
        PromptLookupCandidateGenerator.get_candidates = original  # type: ignore[method-assign]
    past = [(length, count) for length, count in drafts if length + count - 1 > max_length - 1]
    version = f"transformers {transformers.__version__}"
    if past:
        length, count = past[0]
        print(f"BUG: {version}: with max_length={max_length}, {length} tokens so far, prompt lookup drafted {count}, "
              f"so the target reads position {length + count - 1} (at most {max_length - 1} is ever kept)"
              + (f"; on gpt2 with {POSITIONS} positions generate fails: {error}" if error else ""))
        return 1
    if looked_up is not None and torch.equal(looked_up, greedy):
        print(f"FIXED: {version}: no draft reaches past max_length={max_length}, and prompt lookup gives greedy's "
              f"tokens on gpt2 with its {POSITIONS} positions filled")
        return 0
    print(f"OTHER: {version}: no draft reached past max_length, but the generation "
          + (f"failed: {error}" if error else "differs from greedy's"))
    return 2


if __name__ == "__main__":
    sys.exit(main())
