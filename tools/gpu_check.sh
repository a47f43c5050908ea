#!/usr/bin/env bash
# The GPU checks, as one prepared script for a machine with CUDA (torch, triton, pytest,
# matplotlib installed; no plotly or jupyter-book needed). Usage, from the repository root:
#
#   OUT=/some/dir bash tools/gpu_check.sh
#
# On a machine that received a copy of the working tree without .git, record the commit:
# write it first with `git rev-parse HEAD > .relpos-commit` (an untracked file travels with
# the tree); the script exports it as RELPOS_GIT_COMMIT for the benchmark's provenance.
#
# 1. the CUDA-only tests (FlexAttention backward into a learnable table; measured vs
#    analytic bytes within 10%) and the flex kernel tests on the GPU's torch;
# 2. the GPU benchmark (L up to 16384, B=1, H=16, d=64, bf16), JSON with provenance and a
#    plot written to $OUT. Commit the JSON under data/ (e.g. data/bench-h200.json): the
#    chapter "What it costs" plots every committed CUDA run with its provenance.
set -euo pipefail
OUT=${OUT:-bench_out}
mkdir -p "$OUT"
if [ -z "${RELPOS_GIT_COMMIT:-}" ] && [ -f .relpos-commit ] && ! git rev-parse HEAD >/dev/null 2>&1; then
  export RELPOS_GIT_COMMIT="$(cat .relpos-commit)"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MPLBACKEND=Agg
python - <<'PY'
import torch
assert torch.cuda.is_available(), "tools/gpu_check.sh needs a CUDA device"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PY
python -m pytest -q -p no:cacheprovider tests/test_measure.py tests/test_kernels_flex.py tests/test_kernels_sdpa_bias.py 2>&1 | tee "$OUT/gpu-tests.log"
python -m relpos_core.bench --gpu --no-progress --out "$OUT/bench-gpu.json" 2>&1 | tee "$OUT/bench-gpu.log"
