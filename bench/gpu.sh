#!/usr/bin/env bash
# The suite and the speed on a GPU, as one prepared command for a lent GPU machine (docs/what-it-finds.md, "What it
# finds on CUDA"; bench/results/gpu.md records each run with its command). Each part is sized to finish in under 8
# minutes on one H200:
#
#   bash bench/gpu.sh suite [MODELS]   # every level (cudagraphs, cudagraphs_while, export, while...) on CUDA,
#                                      # greedy and sample, float32 and bfloat16; default MODELS: llama,gemma
#   bash bench/gpu.sh throughput       # bench/generation.py throughput: llama,gemma, batch 1 and 8, 64 and 256 tokens
#   bash bench/gpu.sh mid              # the ~1B-parameter bfloat16 configuration, batch 1, 64 tokens
#   bash bench/gpu.sh session          # all of it in one call of under 10 minutes (a lent machine's whole budget):
#                                      # the suite (float32 and bfloat16) beside the throughput builds, then the
#                                      # throughput measured alone, then `mid` if the time left allows
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
    suite|throughput|mid|session) ;;
    *) echo "bench/gpu.sh: unknown part '$part'; use suite, throughput, mid or session" >&2; exit 2 ;;
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
# the package itself: editable where the environment is writable, else beside transformers in /tmp/site
"$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation -e . >/dev/null 2>&1 ||
    "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site . >/dev/null
export PYTHONPATH=${PYTHONPATH:-/tmp/site}
"$PYTHON" -c "import torch, transformers
print(f'torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}, '
      f'CUDA {torch.version.cuda}')" | tee "$OUT/environment.txt"
export TORCHINDUCTOR_CACHE_DIR=/tmp/fullgraph-inductor-cache

suite() {  # $1: seconds; interrupted at the limit (SIGINT), the report keeps every check that finished
    RUN_SLOW=1 timeout -s INT -k 30 "$1" "$PYTHON" -m pytest -n "$2" -p no:cacheprovider -q suites/test_conformance.py \
        --fullgraph-models="$models" --fullgraph-device=cuda --fullgraph-scenarios=greedy,sample \
        --fullgraph-dtype=float32,bfloat16 --fullgraph-max-new-tokens=8 \
        -k "not while64 and not while256" --fullgraph-report="$OUT/suite" > "$OUT/suite.log" 2>&1 || true
}
throughput() {  # $1: build or measure; $2: seconds
    timeout -k 10 "$2" "$PYTHON" bench/generation.py throughput --models llama,gemma --batch 1 8 --tokens 64 256 \
        --variants ours_aoti ours_compiled_while --jobs 8 --phase "$1" --workdir /tmp/fullgraph-builds || true
}

case "$part" in
session)  # times count from the script's start (SECONDS): the whole call stays under 580 s
    # the builds in the background, the suite in the foreground: a background job's SIGINT is ignored (the
    # suite's limit must interrupt it, not kill it, so that its report keeps what finished)
    throughput build $((280 - SECONDS)) > "$OUT/throughput-build.log" 2>&1 &
    suite $((290 - SECONDS)) 8
    wait
    echo "suite and builds: done at $SECONDS s"; tail -3 "$OUT/suite.log"
    throughput measure $((555 - SECONDS)) | tee "$OUT/throughput.md"
    cp /tmp/fullgraph-builds/*.jsonl "$OUT/" 2>/dev/null || true
    left=$((570 - SECONDS))
    if [ "$left" -gt 150 ]; then
        timeout -k 10 "$left" "$PYTHON" bench/generation.py throughput --models llama --size mid --dtype bfloat16 \
            --batch 1 --tokens 64 --variants ours_compiled_while 2>&1 | tee "$OUT/mid.md" || true
    fi
    echo "session: $SECONDS s"
    ;;
suite)
    suite 450 6
    tail -40 "$OUT/suite.log"
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
