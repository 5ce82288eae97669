#!/usr/bin/env bash
# Every GPU check of graphrt in one command, about four minutes on one NVIDIA GPU:
# the CUDA tests, the whole suite with cupy present, and the GPU benchmarks
# (benchmarks/gpu_models.py: ResNet-50 and the encoder against PyTorch, __copy bandwidth;
# benchmarks/graph_replay.py: launch overhead per node). Each writes its log into OUTDIR.
#
# Usage: bash benchmarks/gpu_checks.sh OUTDIR
# Needs graphrt importable with its `cuda13` (or `cuda12`) and `test` extras, pytest-xdist,
# and PyTorch with CUDA and torchvision for the benchmarks' PyTorch columns.
set -u
out=${1:?usage: gpu_checks.sh OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

step() {  # step NAME SECONDS COMMAND...: run it with a time limit, log it, say how it went
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - start)) s" | tee -a "$out/summary.log"
    grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$out/$name.log" | tail -25 \
        | tee -a "$out/summary.log"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    >"$out/summary.log" 2>&1
step cuda_tests 240 python3 -m pytest -q -p no:cacheprovider -m cuda tests
step gpu_models 420 python3 benchmarks/gpu_models.py --json "$out/gpu_models.json"
tail -40 "$out/gpu_models.log" >>"$out/summary.log"
step graph_replay 60 python3 benchmarks/graph_replay.py --device cuda:0
tail -6 "$out/graph_replay.log" >>"$out/summary.log"
step suite 300 python3 -m pytest -q -p no:cacheprovider -n 14 --ignore=tests/fuzz tests
