#!/usr/bin/env bash
# The GPU checks and benchmarks of issue #13 on a machine with one CUDA GPU, in two parts
# that each fit a 10-minute slot. Each step's whole output goes to OUTDIR/<step>.log and
# its last lines to stdout; a step that fails or times out does not stop the others.
#
#   bench/gpu_checks.sh part1 OUTDIR   # local training vs centralized (LeNet 28 px), Recall@FAR on
#                                      # 100k embeddings GPU vs CPU
#   bench/gpu_checks.sh part2 OUTDIR   # clients batched (LeNet, ResNet-GN 64 px), local training vs
#                                      # centralized (ResNet-GN 64 px), ranks sharing the GPU, rounds on
#                                      # P CPU processes
#   bench/gpu_checks.sh part3 OUTDIR [TESTS...]  # the test suite (or TESTS) with CUDA present
#                                      # (15 workers of one thread each: tests/conftest.py)
#   bench/gpu_checks.sh part4 OUTDIR   # issue #36: rounds on 1, 4, 8 and 16 CPU processes of the
#                                      # machine's 16 cores (goal: 16 processes >= 12x one)
#
# Needs python with torch (CUDA build) and dpemb's dependencies; dpemb runs from src/.
set -u
part=${1:?part1, part2, part3 or part4}
out=${2:?OUTDIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}

step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc $rc, $((SECONDS - t0)) s: $*"
  grep -v -E "it/s\]|tile/s\]|s/it\]|^\s*$" "$out/$name.log" | tail -n "${TAIL:-28}"
}

if [ "$part" = part1 ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, dp_accounting; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
  step federated_lenet 240 $PY bench/bench_federated.py --device cuda --threads 4 --users 3000 --clients 64 \
    --users-per-client 4 --rounds 4 --repeats 2 --client-batch 1 16 64 --central-batch 32 256 --no-profile
  step recall_100k 150 $PY bench/bench_recall.py --n 100000 --identities 10000 --devices cuda cpu
elif [ "$part" = part2 ]; then
  step batched_lenet 45 $PY bench/bench_batched_clients.py --clients 64 --batch-clients 1 8 32 64 --seconds 3
  step batched_resnet64 45 $PY bench/bench_batched_clients.py --backbone resnet-gn --image-size 64 \
    --clients 32 --batch-clients 1 8 32 --seconds 3
  step federated_resnet64 190 $PY bench/bench_federated.py --device cuda --threads 4 --backbone resnet-gn \
    --image-size 64 --users 800 --clients 32 --users-per-client 4 --rounds 3 --repeats 2 --client-batch 1 8 32 \
    --central-batch 32 256 --no-profile
  step ranks_share_gpu 120 $PY bench/bench_distributed.py --device cuda --procs 2 4 --clients 16 --rounds 4 \
    --run-timeout 45
  step distributed_cpu 150 $PY bench/bench_distributed.py --procs 2 4 8 --clients 32 --rounds 5 --run-timeout 45
elif [ "$part" = part3 ]; then  # the test suite with CUDA present; -v streams each failure's name
  shift 2
  timeout 560 $PY -m pytest -v -p no:cacheprovider -p no:benchmark -n 15 --timeout 240 -m "not slow" --tb=short \
    "${@:-tests}" >"$out/tests_on_gpu.log" 2>&1
  echo "=== tests_on_gpu: rc $?"
  grep -E "FAILED|ERROR|[0-9]+ (passed|failed)" "$out/tests_on_gpu.log" | grep -v "^\[gw[0-9]*\] \[.*PASSED" | tail -n 60
elif [ "$part" = part4 ]; then  # 64 clients of 1 user (80 images): 4 clients per rank at 16 ranks
  nproc
  step distributed_cpu_16 560 $PY bench/bench_distributed.py --procs 4 8 16 --clients 64 --users-per-client 1 \
    --rounds 8 --run-timeout 200
else
  echo "unknown part $part" >&2
  exit 2
fi
