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
# Both steps always run; the script exits non-zero if either failed (the benchmark exits
# 1 when a row errored, after writing its JSON).
set -uo pipefail
OUT=${OUT:-bench_out}
mkdir -p "$OUT"
if [ -z "${RELPOS_GIT_COMMIT:-}" ] && [ -f .relpos-commit ] && ! git rev-parse HEAD >/dev/null 2>&1; then
  export RELPOS_GIT_COMMIT="$(cat .relpos-commit)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python - <<'PY' || exit 2
import torch
assert torch.cuda.is_available(), "tools/gpu_check.sh needs a CUDA device"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PY
python -m pytest -q -p no:cacheprovider -k cuda tests/test_bench.py tests/test_measure.py tests/test_attend.py \
  2>&1 | tee "$OUT/gpu-tests.log"
tests_status=${PIPESTATUS[0]}
lengths=()
if [ -n "${GPU_LENGTHS:-}" ]; then
  read -r -a lengths <<< "$GPU_LENGTHS"
  lengths=(--lengths "${lengths[@]}")
fi
python -m relpos_core.bench --gpu --no-progress --out "$OUT/bench-gpu.json" "${lengths[@]}" 2>&1 | tee "$OUT/bench-gpu.log"
bench_status=${PIPESTATUS[0]}
echo "gpu_check: tests exit $tests_status, benchmark exit $bench_status"
[ "$tests_status" -eq 0 ] && [ "$bench_status" -eq 0 ]
