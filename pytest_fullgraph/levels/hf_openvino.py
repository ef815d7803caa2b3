"""``hf_openvino``: transformers' OpenVINO exporter (``transformers.exporters``' ``openvino`` back end) and its runner,
judged as the other exporters are (opt-in, extra ``openvino``): its prefill and decode programs, converted to
``openvino.Model`` and compiled by OpenVINO's runtime on the CPU, run by ``OpenVINOModelRunner`` in the host loop
that feeds each step what ``generate`` fed the forward. A difference is told apart as for ONNX: the same programs
as torch.export made them (the dynamo back end) in the same loop say whether the conversion or runtime is at fault.

Exported with ``OpenVINOConfig(stateful=False)``: the exporter's default folds the cache into the runtime's own
variables, so its programs return no cache, and the runner, fed by a loop that hands the cache from prefill to
decode, fails rebuilding its outputs (measured: ``StopIteration`` at ``exporters/runners/base.py:51``, tiny llama).
"""

from __future__ import annotations

from typing import Any

from pytest_fullgraph.levels.hf import HfExporterLevel


class HfOpenvinoLevel(HfExporterLevel):
    name = "hf_openvino"
    description = ("transformers.exporters' openvino back end, converted by openvino.convert_model and run by "
                   "OpenVINO's runtime (CPU) in the same host loop (greedy)")
    requires = ("openvino",)
    extra = "openvino"
    conversion = "OpenVINO conversion or OpenVINO's runtime"

    def export_config(self) -> Any:
        from transformers.exporters import OpenVINOConfig

        return OpenVINOConfig(stateful=False)
