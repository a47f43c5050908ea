#!/usr/bin/env bash
# The GPU checks, as one prepared script for a machine with CUDA (torch, triton, pytest,
# transformers installed; step 3 also needs plotly, ipywidgets, ipykernel and nbclient, the
# [book] extra, and is skipped with a message where they are missing). From the repository root:
#
#   OUT=/some/dir bash tools/gpu_check.sh
#
# On a machine that received a copy of the working tree without .git, record the commit
# first with `git rev-parse HEAD > .relpos-commit` (an untracked file travels with the
# tree); the script exports it as RELPOS_GIT_COMMIT for the benchmark's provenance.
#
# 1. the CUDA-only tests (every test whose name says cuda: the benchmark's quick preset on
#    the GPU, measured against analytic bytes, ...), log in $OUT/gpu-tests.log;
# 2. the GPU benchmark, `python -m relpos_core.bench --gpu` (L = 1024 ... 16384, B=1, H=16,
#    d=64, bf16; FlexAttention compiled; the Hugging Face modules up to L = 4096), JSON
#    with provenance in $OUT/bench-gpu.json (and an HTML figure page when plotly is
#    installed). Set GPU_LENGTHS="1024 4096 16384" to sweep fewer lengths when device
#    time is short. Commit the JSON as data/bench-<gpu name>.json: chapters/11_what_it_costs.ipynb plots it with
#    its provenance, apart from the H200 reference data.
#
# 3. the chapters that measure, executed on the GPU as a reader in Colab runs them
#    (tools/run_pages.py: each alone in an empty folder): 7 (the KV cache: a decode
#    benchmark on this GPU), 8 (the costs: live paths, with the kernel that ran) and 9
#    (failure modes: SDPA's kernel choice for a dense bias on this GPU). Each prints which
#    device ran and in which dtype (bfloat16 on sm80+, float16 below); the executed copies
#    with their outputs go to $OUT/pages/, and a cell that fails or writes to stderr fails
#    the step. GPU_CHAPTERS="11_what_it_costs" runs fewer.
#
# 4. one decode step of every cache layout at long context (chapters/09_kv_cache_at_scale.ipynb):
#    `python -m relpos_core.decoding --scale --preset gpu` (MHA with rotated and unrotated
#    RoPE keys, GQA, MQA, MLA absorbed and expanded; 32 heads of 128, bf16, contexts 4096
#    to 131072), JSON with provenance in $OUT/kv-scale-gpu.json. KV_CONTEXTS="4096 16384"
#    times fewer contexts; KV_PRESET=tiny a small preset (to check the script on a CPU).
#    Commit it as relpos_core/data/kv_scale_<gpu name>.json; chapters/09_kv_cache_at_scale.ipynb plots the
#    committed CPU run and does not read a GPU run yet.
#
# Every chosen step runs; the script exits non-zero if any failed (the benchmark exits 1
# when a row errored, after writing its JSON). GPU_STEPS="tests bench pages kv-scale"
# picks steps (an unknown name is refused). RELPOS_GPU_CHECK_ON_CPU=1 lets the script run
# without a GPU (to test the script itself: the pages then say they ran on the CPU):
#
#   RELPOS_GPU_CHECK_ON_CPU=1 GPU_STEPS=kv-scale KV_PRESET=tiny OUT=/tmp/check bash tools/gpu_check.sh
set -uo pipefail
OUT=${OUT:-bench_out}
mkdir -p "$OUT"
if [ -z "${RELPOS_GIT_COMMIT:-}" ] && [ -f .relpos-commit ] && ! git rev-parse HEAD >/dev/null 2>&1; then
  export RELPOS_GIT_COMMIT="$(cat .relpos-commit)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
steps=" ${GPU_STEPS:-tests bench pages kv-scale} "
KV_PRESET=${KV_PRESET:-gpu}
for step in $steps; do
  case "$step" in tests|bench|pages|kv-scale) ;;
    *) echo "gpu_check: unknown step '$step' (tests, bench, pages, kv-scale)"; exit 2;;
  esac
done
python - <<'PY' || exit 2
import os
import torch
if os.environ.get("RELPOS_GPU_CHECK_ON_CPU") != "1":
    assert torch.cuda.is_available(), "tools/gpu_check.sh needs a CUDA device"
    print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
else:
    print("RELPOS_GPU_CHECK_ON_CPU=1: running without a GPU (a test of this script)")
PY
tests_status=0 bench_status=0 pages_status=0 kv_status=0
if [[ $steps == *" tests "* ]]; then
  python -m pytest -q -p no:cacheprovider -k cuda tests/test_bench.py tests/test_measure.py tests/test_attend.py \
    2>&1 | tee "$OUT/gpu-tests.log"
  tests_status=${PIPESTATUS[0]}
fi
if [[ $steps == *" bench "* ]]; then
  lengths=()
  if [ -n "${GPU_LENGTHS:-}" ]; then
    read -r -a lengths <<< "$GPU_LENGTHS"
    lengths=(--lengths "${lengths[@]}")
  fi
  python -m relpos_core.bench --gpu --no-progress --out "$OUT/bench-gpu.json" "${lengths[@]}" 2>&1 | tee "$OUT/bench-gpu.log"
  bench_status=${PIPESTATUS[0]}
fi
if [[ $steps == *" pages "* ]]; then
  if python -c "import plotly, ipywidgets, ipykernel, nbclient, nbformat" 2>/dev/null; then
    read -r -a chapters <<< "${GPU_CHAPTERS:-08_the_kv_cache 11_what_it_costs 12_failure_modes}"
    pages=()
    for c in "${chapters[@]}"; do pages+=("chapters/$c.ipynb"); done
    python tools/run_pages.py --out "$OUT/pages" "${pages[@]}" 2>&1 | tee "$OUT/pages.log"
    pages_status=${PIPESTATUS[0]}
  else
    echo "gpu_check: step 3 skipped: plotly, ipywidgets, ipykernel, nbclient or nbformat missing (pip install 'relpos_core[book]' nbclient)" | tee "$OUT/pages.log"
    pages_status=3
  fi
fi
if [[ $steps == *" kv-scale "* ]]; then
  contexts=()
  if [ -n "${KV_CONTEXTS:-}" ]; then
    read -r -a contexts <<< "$KV_CONTEXTS"
    contexts=(--contexts "${contexts[@]}")
  fi
  python -m relpos_core.decoding --scale --preset "$KV_PRESET" --out "$OUT/kv-scale-$KV_PRESET.json" --force \
    "${contexts[@]}" 2>&1 | tee "$OUT/kv-scale-$KV_PRESET.log"
  kv_status=${PIPESTATUS[0]}
fi
echo "gpu_check: tests exit $tests_status, benchmark exit $bench_status, pages exit $pages_status, kv-scale exit $kv_status"
[ "$tests_status" -eq 0 ] && [ "$bench_status" -eq 0 ] && [ "$pages_status" -eq 0 ] && [ "$kv_status" -eq 0 ]
