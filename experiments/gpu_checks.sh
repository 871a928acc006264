#!/usr/bin/env bash
# The GPU checks of issues 47 and 48, in one run on a machine with a CUDA device (under 10 minutes on
# one H100 or H200): the tests marked `gpu` (tests/test_torch_gpu.py: measuring on the GPU,
# the peak against max_memory_allocated, a model too big for it, fidelity there) and the
# one-GPU fidelity table of three models of different sizes (`moplace fidelity`, bf16, the
# plans single and 2/4/8 micro-batches at two sequence lengths).
#
# Such a machine has PyTorch with CUDA, transformers and numba, and no network: moplace is
# installed without its dependencies (mlflow, pymoo, optuna are not needed here: nothing
# below imports them), else run from the checkout through PYTHONPATH.
#
#     bash experiments/gpu_checks.sh          # results in $OUT when set, else experiments/results
set -u
cd "$(dirname "$0")/.."
results=${OUT:-experiments/results}
mkdir -p "$results"
start=$SECONDS
budget=${GPU_CHECKS_SECONDS:-570}  # the whole run, seconds
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MOPLACE_CACHE=${MOPLACE_CACHE:-$(mktemp -d)}
export PYTHONUNBUFFERED=1
log="$results/gpu-checks.log"
: > "$log"
say() { echo "$*" | tee -a "$log"; }
left() { echo $(( budget - (SECONDS - start) )); }

pip install --no-deps --no-build-isolation -q -e . >> "$log" 2>&1 \
    || say "pip install -e . failed (see $log): running from the checkout (PYTHONPATH)"
python3 - <<'EOF' 2>&1 | tee -a "$log"
import importlib.util, platform
import torch
print(f"python {platform.python_version()}, torch {torch.__version__}, CUDA "
      f"{torch.version.cuda}, GPU {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
missing = [m for m in ("numpy", "numba", "networkx", "transformers", "matplotlib", "pytest")
           if importlib.util.find_spec(m) is None]
print("missing:", ", ".join(missing) or "nothing")
import moplace.cli  # noqa: F401 - fails here, not halfway, when a dependency is missing
EOF
[ "${PIPESTATUS[0]}" -eq 0 ] || { say "moplace cannot be imported here: stopping"; exit 2; }

say "== tests marked gpu ($(date -u +%H:%M:%S))"
if python3 -c "import pytest" 2>/dev/null; then
    timeout 420 python3 -m pytest -o addopts="" -p no:cacheprovider -m gpu -q -rA \
        tests/test_torch_gpu.py 2>&1 | tee "$results/gpu-tests.txt"
else  # no pytest on the machine: the test functions run as a plain script
    timeout 420 python3 tests/test_torch_gpu.py 2>&1 | tee "$results/gpu-tests.txt"
fi
tests=${PIPESTATUS[0]}
say "gpu tests exit status $tests ($(( SECONDS - start )) s so far)"

# model, batch, sequence lengths: 124 M, 355 M and 1.3 B parameters
status=0
for spec in "gpt2 8 512,1024" "gpt2-medium 8 512,1024" "gpt3-1.3b 8 512,1024"; do
    set -- $spec
    remaining=$(left)
    if [ "$remaining" -lt 30 ]; then
        say "hf:$1: skipped, the run's ${budget} s are spent"; status=1; continue
    fi
    say "== fidelity hf:$1, batch $2, tokens $3 (at most ${remaining} s; $(date -u +%H:%M:%S))"
    timeout "$remaining" python3 -m moplace.cli fidelity "hf:$1" --batch "$2" --seq-len "$3" \
        --dtype bf16 --device cuda --micro-batches 1,2,4,8 --steps 10 --no-mlflow --quiet \
        --force -o "$results/torch-fidelity-gpu-$1" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
# issue 48: the PyTorch testbed of one process on the GPU (NCCL) runs the one-device plans,
# recomputation among them, against the simulator on the kernel times measured there
remaining=$(left)
if [ "$remaining" -ge 30 ]; then
    say "== testbed fidelity hf:gpt2 on the GPU (at most ${remaining} s; $(date -u +%H:%M:%S))"
    timeout "$remaining" python3 -m moplace.cli fidelity hf:gpt2 --batch 8 --seq-len 512 \
        --dtype bf16 --testbed 1 --device cuda --steps 10 --front-points 0 --calibration 0 \
        --no-mlflow --quiet --force -o "$results/torch-testbed-gpu-gpt2" 2>&1 | tee -a "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
    say "testbed fidelity on the GPU: skipped, the run's ${budget} s are spent"; status=1
fi
say "done in $(( SECONDS - start )) s: tests exit $tests, fidelity exit $status; results in $results"
[ "$tests" -eq 0 ] && [ "$status" -eq 0 ]
