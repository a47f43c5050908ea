#!/usr/bin/env bash
# The GPU checks, as one prepared script for a machine with CUDA (torch, triton, pytest,
# transformers installed; plotly and jupyter-book are optional). From the repository root:
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
#    time is short. Commit the JSON as data/bench-<gpu name>.json: chapter 8 plots it with
#    its provenance, apart from the H200 reference data.
#
# 3. one decode step of every cache layout at long context (chapter 7b):
#    `python -m relpos_core.decoding --scale --preset gpu` (MHA with rotated and unrotated
#    RoPE keys, GQA, MQA, MLA absorbed and expanded; 32 heads of 128, bf16, contexts 4096
#    to 131072), JSON with provenance in $OUT/kv-scale-gpu.json. Set KV_CONTEXTS="4096
#    16384" to time fewer contexts. Commit it as data/kv_scale_<gpu name>.json; chapter 7b
#    plots the committed CPU run (data/kv_scale_cpu.json) and does not read a GPU run yet.
#
# GPU_CHECK_STEPS chooses the steps (default "tests bench kv-scale"). Without a GPU the
# kv-scale step alone runs on the CPU with a small preset, to check the script itself:
#
#   GPU_CHECK_STEPS=kv-scale KV_PRESET=tiny OUT=/tmp/check bash tools/gpu_check.sh
#
# Every chosen step runs; the script exits non-zero if any failed (the benchmark exits
# 1 when a row errored, after writing its JSON).
set -uo pipefail
OUT=${OUT:-bench_out}
STEPS=${GPU_CHECK_STEPS:-"tests bench kv-scale"}
KV_PRESET=${KV_PRESET:-gpu}
mkdir -p "$OUT"
if [ -z "${RELPOS_GIT_COMMIT:-}" ] && [ -f .relpos-commit ] && ! git rev-parse HEAD >/dev/null 2>&1; then
  export RELPOS_GIT_COMMIT="$(cat .relpos-commit)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
has_step() { [[ " $STEPS " == *" $1 "* ]]; }
for step in $STEPS; do
  case "$step" in tests|bench|kv-scale) ;; *) echo "gpu_check: unknown step '$step' (tests, bench, kv-scale)"; exit 2;; esac
done
if has_step tests || has_step bench || [ "$KV_PRESET" = gpu ]; then
  python - <<'PY' || exit 2
import torch
assert torch.cuda.is_available(), "tools/gpu_check.sh needs a CUDA device (or GPU_CHECK_STEPS=kv-scale KV_PRESET=tiny)"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PY
fi
tests_status=0 bench_status=0 kv_status=0
if has_step tests; then
  python -m pytest -q -p no:cacheprovider -k cuda tests/test_bench.py tests/test_measure.py tests/test_attend.py \
    2>&1 | tee "$OUT/gpu-tests.log"
  tests_status=${PIPESTATUS[0]}
fi
if has_step bench; then
  lengths=()
  if [ -n "${GPU_LENGTHS:-}" ]; then
    read -r -a lengths <<< "$GPU_LENGTHS"
    lengths=(--lengths "${lengths[@]}")
  fi
  python -m relpos_core.bench --gpu --no-progress --out "$OUT/bench-gpu.json" "${lengths[@]}" 2>&1 | tee "$OUT/bench-gpu.log"
  bench_status=${PIPESTATUS[0]}
fi
if has_step kv-scale; then
  contexts=()
  if [ -n "${KV_CONTEXTS:-}" ]; then
    read -r -a contexts <<< "$KV_CONTEXTS"
    contexts=(--contexts "${contexts[@]}")
  fi
  python -m relpos_core.decoding --scale --preset "$KV_PRESET" --out "$OUT/kv-scale-$KV_PRESET.json" --force \
    "${contexts[@]}" 2>&1 | tee "$OUT/kv-scale-$KV_PRESET.log"
  kv_status=${PIPESTATUS[0]}
fi
echo "gpu_check: steps '$STEPS': tests exit $tests_status, benchmark exit $bench_status, kv-scale exit $kv_status"
[ "$tests_status" -eq 0 ] && [ "$bench_status" -eq 0 ] && [ "$kv_status" -eq 0 ]
