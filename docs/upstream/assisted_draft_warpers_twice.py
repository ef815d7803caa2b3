"""Speculative sampling's draft model applies every sampling warper twice (transformers 5.24).

Found by pytest_fullgraph: ``generate(do_sample=True, temperature=T, assistant_model=draft)`` hands the target's
logits processors, warpers included, to the draft model's own ``generate`` (``AssistedCandidateGenerator``).
There ``_get_logits_processor`` merges those custom processors into its list *before* it appends the warpers
built from the same config, so the draft's list holds ``TemperatureLogitsWarper`` (and top-k, top-p, ...) twice:
the draft samples at temperature T*T (0.49 for 0.7) and filters twice. Speculative sampling's acceptance reads the
draft's scores as they were, so the output distribution stays the target's; but the drafts are not the draft
model's at T, so how many are accepted (the speed-up) is not what the user configured.

Needs only torch and transformers, no download (two tiny random llamas). Exit 1 and "BUG: ..." while the draft
runs a warper twice; exit 0 and "FIXED: ..." once each warper runs once; exit 2 and "OTHER: ..." otherwise.
"""

import sys
from collections import Counter
from typing import Any

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.generation.utils import GenerationMixin

WARPERS = ("TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper")


def tiny_llama(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def main() -> int:
    target, draft = tiny_llama(0), tiny_llama(1)
    built: list[Any] = []
    original = GenerationMixin._get_logits_processor

    def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        processors = original(self, *args, **kwargs)
        if self is draft:
            built.append(processors)
        return processors

    GenerationMixin._get_logits_processor = recorded  # type: ignore[method-assign]
    config = GenerationConfig(max_new_tokens=4, do_sample=True, temperature=0.7, top_k=20, top_p=0.9,
                              pad_token_id=0, eos_token_id=None)
    try:
        target.generate(torch.tensor([[5, 9, 14, 3, 27, 8]]), generation_config=config, assistant_model=draft)
    except Exception as error:
        print(f"OTHER: assisted generate failed: {type(error).__name__}: {str(error).splitlines()[0]}")
        return 2
    finally:
        GenerationMixin._get_logits_processor = original  # type: ignore[method-assign]
    if not built:
        print("OTHER: the draft model's generate built no logits processors")
        return 2
    counts = Counter(type(processor).__name__ for processor in built[0])
    twice = {name: counts[name] for name in WARPERS if counts[name] > 1}
    names = [type(processor).__name__ for processor in built[0]]
    import transformers

    if twice:
        print(f"BUG: transformers {transformers.__version__}: the draft model's processors are {names}: "
              f"{', '.join(f'{name} x{count}' for name, count in twice.items())} (a temperature of 0.7 applied "
              "twice samples the draft at 0.49)")
        return 1
    if all(counts[name] == 1 for name in WARPERS):
        print(f"FIXED: transformers {transformers.__version__}: the draft model runs each warper once: {names}")
        return 0
    print(f"OTHER: the draft model's processors are {names}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
