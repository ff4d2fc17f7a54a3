#!/usr/bin/env bash
# The GPU checks and benchmarks of issues #13 and #36 on a machine with one CUDA GPU and 16 CPU
# cores, in parts that each fit a 10-minute slot. Each step's whole output goes to OUTDIR/<step>.log and
# its last lines to stdout; a step that fails or times out does not stop the others.
#
#   bench/gpu_checks.sh part1 OUTDIR   # local training vs centralized (LeNet 28 px), Recall@FAR on
#                                      # 100k embeddings GPU vs CPU
#   bench/gpu_checks.sh part2 OUTDIR   # clients batched (LeNet, ResNet-GN 64 px), local training vs
#                                      # centralized (ResNet-GN 64 px), ranks sharing the GPU, rounds on
#                                      # P CPU processes
#   bench/gpu_checks.sh part3 OUTDIR [TESTS...]  # the test suite (or TESTS) with CUDA present
#                                      # (15 workers of one thread each: tests/conftest.py)
#   bench/gpu_checks.sh part4 OUTDIR [DATA]  # issue #36: rounds on 1, 4, 8, 15 and 16 CPU processes of
#                                      # the machine's 16 cores (goal: 16 processes >= 12x one), each rank's
#                                      # time on its clients, clients of 1 and of 4 users; DATA: a
#                                      # glyph dataset made elsewhere (the machine may lack the fonts)
#   bench/gpu_checks.sh part5 OUTDIR FACES INIT  # issue #36: the round of a real 100,000-user run
#                                      # (M = 349 clients of K = 8 users, the recipe face-100k-eps2) on the GPU
#                                      # with B = 1, 64 and 349 clients at once, and on 16 CPU processes;
#                                      # FACES: the recipe's data, INIT: its public pretraining (face-pretrain)
#
# Needs python with torch (CUDA build) and dpemb's dependencies; dpemb runs from src/.
set -u
part=${1:?part1 to part5}
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
elif [ "$part" = part4 ]; then  # clients of 1 user (up to 80 images): 4, then 10 clients per rank at 16 ranks;
  nproc                           # then 15 ranks (a core left for the rest), and 2 clients of 4 users a rank
  step distributed_cpu_16 240 $PY bench/bench_distributed.py --procs 4 8 15 16 --clients 64 --users-per-client 1 \
    --rounds 8 --run-timeout 120 ${3:+--data "$3"}
  step distributed_cpu_16_m160 240 $PY bench/bench_distributed.py --procs 8 15 16 --clients 160 --users-per-client 1 \
    --rounds 6 --run-timeout 160 ${3:+--data "$3"}
  step distributed_cpu_16_k4 240 $PY bench/bench_distributed.py --procs 16 --clients 32 --users-per-client 4 \
    --rounds 5 --run-timeout 160 ${3:+--data "$3"}
elif [ "$part" = part5 ]; then  # a round of the real population: 2,792 users in 349 virtual clients
  faces=${3:?FACES}; init=${4:?INIT}
  real_round() {  # real_round NAME SECONDS ROUNDS "LAUNCHER" FLAGS...: median round seconds (PRIVATE diagnostics)
    local name=$1 limit=$2 rounds=$3 launcher=$4; shift 4
    step "$name" "$limit" $launcher -m dpemb train --recipe face-100k-eps2 --data "$faces" --init "$init" \
      --out "$out/run_$name" --clients-per-round 349 --rounds "$rounds" --eval-every 1000 --noise-multiplier 2.33 \
      --noise-seed 1 --no-progress "$@"
    $PY -c "import json, statistics, sys; r = [json.loads(l) for l in open(sys.argv[1])]; \
s = [x['seconds'] for x in r if 'seconds' in x]; print(f'$name: rounds {len(s)}, seconds {[round(x, 2) for x in s]}, ' \
f'median without the first {statistics.median(s[1:] or s):.2f} s')" "$out/run_$name/private/diagnostics.jsonl"
  }
  real_round gpu_b349 80 4 "$PY" --device cuda --client-batch 349
  real_round gpu_b64 80 4 "$PY" --device cuda --client-batch 64
  real_round gpu_b1 90 2 "$PY" --device cuda --client-batch 1
  real_round cpu_16procs 90 3 "$PY -m torch.distributed.run --nproc-per-node 16 --master-addr 127.0.0.1 \
--master-port 29517" --device cpu
else
  echo "unknown part $part" >&2
  exit 2
fi
