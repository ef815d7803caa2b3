#!/usr/bin/env bash
# The suite and the speed on a GPU, as one prepared command for a lent GPU machine (docs/what-it-finds.md, "What it
# finds on CUDA"; bench/RESULTS.md records each run with its command). Each part is sized to finish in under 8
# minutes on one H200:
#
#   bash bench/gpu.sh suite [MODELS]   # every level (cudagraphs, cudagraphs_while, export, while...) on CUDA,
#                                      # greedy and sample, float32 and bfloat16; default MODELS: llama,gemma
#   bash bench/gpu.sh throughput       # bench/generation.py throughput: llama,gemma, batch 1 and 8, 64 and 256 tokens
#   bash bench/gpu.sh mid              # the ~1B-parameter bfloat16 configuration, batch 1, 64 tokens
#
# Outputs go to $OUT (the device tool's folder that comes back; /tmp/fullgraph-gpu elsewhere). transformers 5.24.0
# travels as a wheel in .whl/ (`echo /.whl/ >> .git/info/exclude`, then `pip download --no-deps --only-binary=:all:
# -d .whl transformers==5.24.0`); the machine's own torch is used as installed ($PYTHON, default python3). Where
# that python has no CUDA device the script stops at once, saying so (exit 2).
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-suite}
models=${2:-llama,gemma}
OUT=${OUT:-/tmp/fullgraph-gpu}
PYTHON=${PYTHON:-python3}
case "$part" in
    suite|throughput|mid) ;;
    *) echo "bench/gpu.sh: unknown part '$part'; use suite, throughput or mid" >&2; exit 2 ;;
esac
if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "bench/gpu.sh: no CUDA device (or no torch) for $PYTHON here; the GPU parts need one" >&2
    exit 2
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1

if ls .whl/*.whl >/dev/null 2>&1; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
"$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null
"$PYTHON" -c "import torch, transformers
print(f'torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}, '
      f'CUDA {torch.version.cuda}')" | tee "$OUT/environment.txt"
export TORCHINDUCTOR_CACHE_DIR=/tmp/fullgraph-inductor-cache

case "$part" in
suite)
    # -n 6: six workers share the GPU (tiny models); 8 new tokens keep the unrolled cudagraphs compile short
    RUN_SLOW=1 timeout 450 "$PYTHON" -m pytest -n 6 -p no:cacheprovider -q suites/test_conformance.py \
        --fullgraph-models="$models" --fullgraph-device=cuda --fullgraph-scenarios=greedy,sample \
        --fullgraph-dtype=float32,bfloat16 --fullgraph-max-new-tokens=8 \
        -k "not while64 and not while256" --fullgraph-report="$OUT/suite" 2>&1 | tail -40 || true
    ;;
throughput)
    timeout 450 "$PYTHON" bench/generation.py throughput --models llama,gemma --batch 1 8 --tokens 64 256 \
        --variants ours_aoti ours_compiled_while 2>&1 | tee "$OUT/throughput.md"
    ;;
mid)
    timeout 450 "$PYTHON" bench/generation.py throughput --models llama --size mid --dtype bfloat16 --batch 1 \
        --tokens 64 --variants ours_aoti ours_compiled_while 2>&1 | tee "$OUT/mid.md"
    ;;
esac
