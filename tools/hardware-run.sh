#!/usr/bin/env bash
# The GPU hardware run of docs/hardware-runs.md, as one prepared script for a lent H100/H200 (`device` tool).
# Expects the harness's missing dependencies as wheels in .whl/ (and onnxruntime-gpu already installed into
# /tmp/site by the caller, when it could be brought); writes its log and the runs' results under $OUT.
# Every step has its own time limit, so one that hangs costs its step, not the rest.
set -uo pipefail
OUT="${OUT:-/tmp/hardware-run}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HARNESS_CACHE_DIR=/tmp/harness-cache PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/hardware-run.log"
RUNS=/tmp/runs
mkdir -p "$RUNS"
step() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
# run LIMIT CMD...: the command's output into the log, its tail on the terminal, its exit status noted
# DEADLINE: seconds after the start by which every step has ended (a step gets what is left, or is skipped).
DEADLINE="${DEADLINE:-520}"
run() {
  local limit=$1; shift
  if (( SECONDS + limit > DEADLINE )); then limit=$((DEADLINE - SECONDS)); fi
  if (( limit < 15 )); then echo "   skipped: $((DEADLINE - SECONDS)) s left of the deadline" | tee -a "$LOG"; return; fi
  echo "\$ $*" >>"$LOG"
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$RUNS/step.log" 2>&1
  local rc=$?
  cat "$RUNS/step.log" >>"$LOG"
  tail -n "${TAIL:-15}" "$RUNS/step.log"
  echo "   rc=$rc in $((SECONDS - t0)) s" | tee -a "$LOG"
  (cd "$RUNS" && tar czf "$OUT/runs.tar.gz" --exclude='*.onnx' --exclude='*.engine' --exclude='*.bin' gpu-* 2>/dev/null)
}

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee -a "$LOG"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))" | tee -a "$LOG"

step "install: the harness (no deps) over the image's packages, its missing dependencies from .whl"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -3
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -3
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" | tee -a "$LOG"

if [[ "${FOCUS:-0}" == 1 ]]; then
  step "focused rerun: GPU tests, FP32 with TF32 off, cross-check, LoadGen, torch.compile, generation"
  TAIL=8 run 40 python3 -m pytest -q -rs -p no:cacheprovider tests/runtimes/test_gpu_runtimes.py tests/measure/test_cuda.py
  TAIL=40 run 110 harness run --models resnet18,bert-mini,deepseek-tiny --runtimes torch-cuda,ort-cuda \
    --precisions fp32,fp16 --batch-sizes 1,32 --seq-lens 128 --min-time 0.5 --repeats 1 --out "$RUNS/gpu-matrix"
  TAIL=12 run 40 python3 tools/gpu_crosscheck.py "$RUNS/gpu-matrix/results.json" resnet18:torch-cuda:fp32:32 \
    resnet18:torch-cuda:fp16:32 resnet18:ort-cuda:fp32:32 bert-mini:torch-cuda:fp32:1 bert-mini:ort-cuda:fp32:1
  TAIL=25 run 40 harness run --models resnet18 --runtimes torch-cuda --precisions fp32 --batch-sizes 1 --repeats 1 \
    --scenarios single-stream,server --out "$RUNS/gpu-scenarios"
  TAIL=8 run 45 harness run --models resnet18 --runtimes torch-compile-cuda --precisions fp32 --batch-sizes 8 \
    --min-time 0.5 --repeats 1 --out "$RUNS/gpu-compile"
  TAIL=8 run 30 harness run --workload generate --models deepseek-tiny --runtimes ort-cuda --batch-sizes 1 \
    --prompt-lens 32 --output-lens 32 --repeats 1 --out "$RUNS/gpu-generate"
  exit 0
fi

step "runtimes"
TAIL=20 run 40 harness runtimes

step "GPU tests (every skip that names CUDA is read)"
TAIL=25 run 80 python3 -m pytest -q -rs -p no:cacheprovider tests/runtimes/test_gpu_runtimes.py \
  tests/measure/test_cuda.py tests/measure/test_memory.py tests/results/test_environment_gpu.py

step "matrix: resnet18, bert-mini, deepseek-tiny x GPU runtimes x fp32, fp16, int8 x batch 1, 32"
TAIL=12 run 200 harness run --models resnet18,bert-mini,deepseek-tiny --runtimes torch-cuda,ort-cuda,ort-trt,tensorrt \
  --precisions fp32,fp16,int8 --batch-sizes 1,32 --seq-lens 128 --min-time 0.5 --case-timeout 60 \
  --out "$RUNS/gpu-matrix"

step "instrument cross-check: bare loops against the harness's figures"
TAIL=12 run 50 python3 tools/gpu_crosscheck.py "$RUNS/gpu-matrix/results.json" resnet18:torch-cuda:fp32:32 \
  resnet18:torch-cuda:fp16:32 resnet18:ort-cuda:fp32:32 bert-mini:torch-cuda:fp32:1 bert-mini:ort-cuda:fp32:1

step "generation: deepseek-tiny on torch-cuda and ort-cuda"
TAIL=10 run 60 harness run --workload generate --models deepseek-tiny --runtimes torch-cuda,ort-cuda \
  --batch-sizes 1,8 --prompt-lens 32 --output-lens 32 --out "$RUNS/gpu-generate"

step "host-to-host ORT CUDA (the PCIe copies inside the timed call)"
TAIL=8 run 40 harness run --models resnet18 --runtimes ort-cuda-h2h --precisions fp32 --batch-sizes 1,32 \
  --min-time 0.5 --out "$RUNS/gpu-h2h"

step "scenarios: resnet18 x torch-cuda single-stream and server"
TAIL=10 run 40 harness run --models resnet18 --runtimes torch-cuda --precisions fp32 --batch-sizes 1 \
  --scenarios single-stream,server --out "$RUNS/gpu-scenarios"

step "conformance on ort-cuda (the full node suite; SIGTERM at the limit keeps what finished)"
TAIL=10 run 45 harness conform --runtimes ort-cuda --out "$RUNS/gpu-conform"

step "qualification: specs/h100.toml"
TAIL=30 run 60 harness qualify specs/h100.toml --out "$RUNS/gpu-qualify"

step "torch.compile on CUDA (one shape: its compile is the cost)"
TAIL=8 run 60 harness run --models resnet18 --runtimes torch-compile-cuda --precisions fp32 --batch-sizes 8 \
  --min-time 0.5 --out "$RUNS/gpu-compile"

step "NVML peak against torch's allocator, per torch-cuda case"
python3 - "$RUNS/gpu-matrix/results.json" <<'EOF' | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    k = c["case"]
    if k["runtime"] == "torch-cuda" and c["status"] == "passed":
        print(k["model"], k["precision"], k["batch"], "gpu_peak_mb", c.get("gpu_peak_mb"), json.dumps(c.get("memory")))
EOF

ls -la "$OUT"
