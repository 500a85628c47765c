#!/bin/bash
# The GPU check of ndebench (a copy of ../shared/gpu/run.sh for the wings' module paths), run from the project root
# on a GPU machine: every GPU test case, `bench` rows captured, a stack's captured region (issue 67) timed without
# and with Continuum Dropout, GunPoint Neural CDE throughput on the GPU (stacks eager and as captured regions)
# beside the machine's CPU cores, in one call of about 10 minutes. Results under $OUT (default /tmp/gpu-check):
# pytest.txt, measure.jsonl.
# The machine has torch with CUDA but no network: the pure-Python dependencies come as wheels in $WHL (default
# .whl, an ignored folder sent along; ../shared/gpu/README.md says how to fill it), the package from its folders.
HERE=$(cd "$(dirname "$0")" && pwd); ROOT=$PWD; OUT=${OUT:-/tmp/gpu-check}; WHL=${WHL:-.whl}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHL"/*.whl > "$OUT/pip.txt" 2>&1
mkdir -p /tmp/pkg/ndebench; for d in platform models regularizers datasets; do ln -sfn "$ROOT/$d" /tmp/pkg/ndebench/$d; done
export PYTHONPATH=/tmp/pkg:/tmp/site
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
# The files with a CUDA case (marker `gpu`, or fakes.DEVICES' cuda parameter); the others import Ray or MLflow.
# tests/test_gpu.py runs the same selection with Ray, Optuna and MLflow hidden.
timeout ${T_TEST:-150} python3 -m pytest -q -p no:cacheprovider -rfE -m gpu \
  $(grep -l -E 'mark\.gpu|import DEVICES' tests/test_*.py) > "$OUT/pytest.txt" 2>&1
echo "pytest rc $?" >> "$OUT/pytest.txt"
m() { timeout "$1" python3 "$HERE/measure.py" "$OUT/measure.jsonl" "${@:2}" >> "$OUT/measure.log" 2>&1 ||
      echo "{\"kind\": \"timeout\", \"what\": \"${*:2}\"}" >> "$OUT/measure.jsonl"; }
# Continuum Dropout's train ratio of each captured model (one trial) and inside a stack's region (issue 67).
m 60 bench:neural_cde:auto:128:128:noadj bench:neural_ode:auto bench:neural_sde:auto
m 90 region:1:128 region:16:16 region:64:16
# Throughput of the GunPoint trial: stacks as captured regions (best of stack x processes), the eager stack's
# best row of 2026-11-29 again, and the 16 CPU cores, all in this call.
m 200 tp:cuda:16:1:16:1:gunpoint_ncde_stack tp:cuda:64:1:64:1:gunpoint_ncde_stack \
      tp:cuda:64:4:256:1:gunpoint_ncde_stack tp:cuda:128:4:512:1:gunpoint_ncde_stack
m 100 tp:cuda:64:4:256
m 60 tp:cpu:5:16:80
tail -3 "$OUT/pytest.txt"; cut -c1-300 "$OUT/measure.jsonl"
