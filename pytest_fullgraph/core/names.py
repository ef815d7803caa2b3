"""The built-in levels' and scenarios' names, in the order reports list them, and each scenario's feature.

Plain data, importing nothing: reading a report (``report``, ``publish``) orders and labels its levels and scenarios
from here without importing the levels (torch, transformers) or the scenario table. A report's JSON stores its
legends with sorted keys, so the legends alone cannot say that ``forward`` comes before ``generate``; older reports
have no legend for some names at all. ``levels.builtin`` checks at import that its table says the same as these.
A run records each scenario's feature (``scenario_features``); ``SCENARIO_FEATURES`` labels the reports recorded
before it, so a new scenario needs no line here.
"""

from __future__ import annotations

#: The levels this package runs itself (transformers' compiled forward and ``generate``, our loop compiled, exported
#: and under CUDA graphs), in the report's column order.
OWN_LEVEL_NAMES = ("forward", "generate", "decode", "export", "while", "while64", "while256", "cudagraphs",
                   "cudagraphs_while", "cache")
#: transformers' own ways out of Python (``levels.hf``, opt-in), after ours.
HF_LEVEL_NAMES = ("hf_dynamo", "hf_onnx", "hf_executorch", "hf_et_helper", "hf_openvino")
#: Every built-in level, in the report's column order (``levels.builtin.BUILTIN_LEVELS``'s).
BUILTIN_LEVEL_NAMES = OWN_LEVEL_NAMES + HF_LEVEL_NAMES

#: Each scenario's generation feature as reports recorded before their environment carried ``scenario_features``,
#: in the scenario table's order then: the report's feature views name a scenario by its feature.
SCENARIO_FEATURES: dict[str, str] = {
    "greedy": "greedy", "sample": "sample", "eos": "eos", "padded": "padding",
    # logits processors, greedy
    "repetition_penalty": "repetition_penalty", "no_repeat_ngram": "no_repeat_ngram", "bad_words": "bad_words",
    "sequence_bias": "sequence_bias", "min_length": "min_length", "min_new_tokens": "min_new_tokens",
    "forced_bos": "forced_bos", "forced_eos": "forced_eos", "suppress_tokens": "suppress_tokens",
    "begin_suppress": "begin_suppress_tokens", "length_decay": "exponential_decay_length_penalty",
    "remove_invalid": "remove_invalid_values", "renormalize": "renormalize_logits", "watermark": "watermarking",
    "guidance": "classifier_free_guidance", "prefix_constrained": "prefix_allowed_tokens_fn",
    # sampling warpers, each alone
    "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "top_h": "top_h",
    "typical_p": "typical_p", "epsilon": "epsilon_cutoff", "eta": "eta_cutoff",
    # stopping criteria
    "eos_list": "eos_list", "max_length": "max_length", "stop_strings": "stop_strings", "max_time": "max_time",
    # decoding modes
    "beam": "beam_search", "beam_sample": "beam_sample", "beam_eos": "beam_eos", "prompt_lookup": "prompt_lookup",
    "assisted": "assisted", "assisted_sample": "assisted_sample",
}
#: Those scenarios, in the table's order then: a later one follows in the run's own order (``scenarios_selected``).
SCENARIO_NAMES = tuple(SCENARIO_FEATURES)
