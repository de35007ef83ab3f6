#!/usr/bin/env bash
# The GPU hardware run of docs/hardware-runs.md, as one prepared script for a lent H100/H200 (`device` tool).
#
# Expects, under .gpu/ (git-ignored, carried by the caller):
#   .gpu/main/*.whl        the harness's dependencies missing from the device image, and onnxruntime-gpu without
#                          its CUDA provider library (that library is 284 MB: it travels apart, xz-compressed)
#   .gpu/p*/ + .gpu/main/cuda.so.xz.part*   the pieces of libonnxruntime_providers_cuda.so.xz (carried one per
#                          call onto the same warm machine), joined and checked against cuda.so.xz.sha256 here
# Writes its log and the runs' results under $OUT. Every step has its own time limit and the whole run a
# deadline, so one step that hangs costs that step, not the rest. Steps that judge nothing by time (the
# conformance shards, the GPU tests, the runtime list) run side by side first; timed steps run alone after.
set -uo pipefail
OUT="${OUT:-/tmp/hardware-run}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HARNESS_CACHE_DIR=/tmp/harness-cache PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/hardware-run.log"
RUNS=/tmp/runs
mkdir -p "$RUNS"
DEADLINE="${DEADLINE:-470}"   # seconds after the start by which every step has ended
step() { echo "== $(date +%T) [${SECONDS}s] $*" | tee -a "$LOG"; }
keep() { (cd "$RUNS" && tar czf "$OUT/runs.tar.gz" --exclude='*.onnx' --exclude='*.onnx.data' --exclude='*.engine' \
  --exclude='*.bin' --exclude='logs' . 2>/dev/null); }
# run NAME LIMIT CMD...: output to $RUNS/NAME.log (appended to the log), its tail on the terminal, the exit status
run() {
  local name=$1 limit=$2; shift 2
  if (( SECONDS + limit > DEADLINE )); then limit=$((DEADLINE - SECONDS)); fi
  if (( limit < 15 )); then echo "   $name skipped: $((DEADLINE - SECONDS)) s left of the deadline" | tee -a "$LOG"; return; fi
  local t0=$SECONDS
  timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$RUNS/$name.log" 2>&1
  local rc=$?
  { echo "\$ $*"; cat "$RUNS/$name.log"; } >>"$LOG"
  tail -n "${TAIL:-12}" "$RUNS/$name.log"
  echo "   $name: rc=$rc in $((SECONDS - t0)) s (limit $limit)" | tee -a "$LOG"
  if [[ "${KEEP:-1}" == 1 ]]; then keep; fi
}

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv | tee -a "$LOG"
python3 -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, \
torch.backends.cudnn.version(), torch.cuda.get_device_name(0))" | tee -a "$LOG"
nproc | tee -a "$LOG"

if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then  # SKIP_INSTALL=1: a dry run of the plumbing on a machine without a GPU
step "install: dependencies and onnxruntime-gpu from .gpu/main, its CUDA provider joined from the pieces"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .gpu/main/*.whl 2>&1 | tail -3
cat ${PIECES:-/tmp/pieces}/cuda.so.xz.part* .gpu/main/cuda.so.xz.part* > /tmp/cuda.so.xz 2>/dev/null
if (cd /tmp && sed 's#  .*#  /tmp/cuda.so.xz#' "$OLDPWD/.gpu/main/cuda.so.xz.sha256" | sha256sum -c --quiet); then
  python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('/tmp/cuda.so.xz'), \
open('/tmp/site/onnxruntime/capi/libonnxruntime_providers_cuda.so', 'wb'), 1 << 24)"
  echo "CUDA provider library joined and unpacked ($(du -h /tmp/site/onnxruntime/capi/libonnxruntime_providers_cuda.so | cut -f1))" | tee -a "$LOG"
else
  echo "CUDA provider pieces missing or corrupt ($(ls .gpu/p* 2>&1 | tr '\n' ' ')): ort-cuda will skip with its reason" | tee -a "$LOG"
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -3
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.__file__, o.get_available_providers())" \
  | tee -a "$LOG"
fi

step "energy counter (NVML total energy, mJ): before"
ENERGY_PY='import pynvml as n, time, json, sys
n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
t = time.monotonic(); e = n.nvmlDeviceGetTotalEnergyConsumption(h); p = n.nvmlDeviceGetPowerUsage(h)
steps, last, t0 = [], e, time.monotonic()
while time.monotonic() - t0 < 1.0 and len(steps) < 5:   # how often the counter moves (its update period)
    v = n.nvmlDeviceGetTotalEnergyConsumption(h)
    if v != last: steps.append((round(time.monotonic() - t0, 4), v - last)); last = v
    time.sleep(0.001)
print(json.dumps({"label": sys.argv[1], "t": t, "energy_mj": e, "power_mw": p, "updates": steps}))'
python3 -c "$ENERGY_PY" before 2>&1 | tee -a "$LOG" "$RUNS/energy.jsonl"

if [[ "${RERUN:-0}" == 1 ]]; then  # the short rerun after fixes: GPU tests, cross-check rows, the certificate
  step "GPU tests"
  TAIL=8 run gpu-tests 60 python3 -m pytest -q -rs -p no:cacheprovider -m "e2e or not e2e" tests/runtimes/test_gpu_runtimes.py \
    tests/measure/test_cuda.py tests/measure/test_memory.py tests/results/test_environment_gpu.py
  step "the cross-check's cases, 3 rounds, the memory sampler held during the timed loop"
  TAIL=20 run gpu-matrix 100 harness run --models resnet18,bert-mini --runtimes torch-cuda,ort-cuda \
    --precisions fp32,fp16 --batch-sizes 1,32 --seq-lens 128 --min-time 0.3 --repeats 3 --envs off \
    --out "$RUNS/gpu-matrix"
  TAIL=30 run crosscheck 60 python3 tools/gpu_crosscheck.py "$RUNS/gpu-matrix/results.json" \
    resnet18:torch-cuda:fp32:32 resnet18:torch-cuda:fp16:32 resnet18:ort-cuda:fp32:32 resnet18:ort-cuda:fp16:32 \
    bert-mini:torch-cuda:fp32:1 bert-mini:ort-cuda:fp32:1 bert-mini:ort-cuda:fp16:32
  step "qualification: specs/h200.toml"
  TAIL=40 run qualify 90 harness qualify specs/h200.toml --out "$RUNS/gpu-qualify"
  keep; ls -la "$OUT"; echo "done at ${SECONDS}s"
  exit 0
fi

step "side by side (nothing timed): conformance on ort-cuda in 6 shards, the GPU tests, the runtime list"
SHARDS=("test_[ab]*" "test_[cd]*" "test_[e-l]*" "test_[m-qt-z]*" "test_r*" "test_s*")
for i in "${!SHARDS[@]}"; do
  (KEEP=0 TAIL=0 run "conform-$i" 150 harness conform --runtimes ort-cuda -k "${SHARDS[$i]}" --out "$RUNS/gpu-conform-$i" \
    >/dev/null) &
done
(KEEP=0 TAIL=25 run gpu-tests 110 python3 -m pytest -q -rs -p no:cacheprovider -m "e2e or not e2e" tests/runtimes/test_gpu_runtimes.py \
  tests/measure/test_cuda.py tests/measure/test_memory.py tests/results/test_environment_gpu.py) &
(KEEP=0 TAIL=30 run runtimes 40 harness runtimes) &
wait
for i in "${!SHARDS[@]}"; do tail -n 3 "$RUNS/conform-$i.log"; done
python3 - "$RUNS" <<'EOF' | tee -a "$LOG"
import collections, glob, json, sys
total = collections.Counter(); complete = []
for f in sorted(glob.glob(f"{sys.argv[1]}/gpu-conform-*/results.json")):
    d = json.load(open(f))
    complete.append(d.get("complete"))
    total.update(c["status"] for c in d["cases"])
print("conformance ort-cuda, all shards:", dict(total), "cases", sum(total.values()), "shards complete", complete)
EOF

step "matrix: resnet18, bert-mini, deepseek-tiny x torch-cuda, ort-cuda, ort-trt, tensorrt x fp32, fp16 x b1, b32"
TAIL=45 run gpu-matrix 170 harness run --models resnet18,bert-mini,deepseek-tiny \
  --runtimes torch-cuda,ort-cuda,ort-trt,tensorrt --precisions fp32,fp16 --batch-sizes 1,32 --seq-lens 128 \
  --min-time 0.5 --repeats 1 --case-timeout 60 --envs off --out "$RUNS/gpu-matrix"
python3 -c "$ENERGY_PY" after-matrix 2>&1 | tee -a "$LOG" "$RUNS/energy.jsonl"

step "instrument cross-check: bare loops against the harness's figures (FP32 and ORT rows)"
TAIL=12 run crosscheck 50 python3 tools/gpu_crosscheck.py "$RUNS/gpu-matrix/results.json" \
  resnet18:torch-cuda:fp32:32 resnet18:torch-cuda:fp16:32 resnet18:ort-cuda:fp32:32 resnet18:ort-cuda:fp16:32 \
  bert-mini:torch-cuda:fp32:1 bert-mini:ort-cuda:fp32:1 bert-mini:ort-cuda:fp16:32

step "qualification: specs/h100.toml's cases, limits re-chosen from the matrix above, then qualify"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr -cs 'A-Za-z0-9' '-' | tr 'A-Z' 'a-z')
python3 tools/spec_limits.py "$RUNS/gpu-matrix/results.json" specs/h100.toml "$RUNS/spec-${GPU_NAME%-}.toml" \
  --name "gpu-${GPU_NAME%-}" 2>&1 | tee -a "$LOG"
cp "$RUNS/spec-${GPU_NAME%-}.toml" "$OUT/" 2>/dev/null
TAIL=40 run qualify 90 harness qualify "$RUNS/spec-${GPU_NAME%-}.toml" --out "$RUNS/gpu-qualify"

step "torch.compile on CUDA (one shape: its compile is the cost), FP32 IEEE"
TAIL=10 run gpu-compile 60 harness run --models resnet18 --runtimes torch-compile-cuda --precisions fp32 \
  --batch-sizes 8 --min-time 0.5 --repeats 1 --out "$RUNS/gpu-compile"

step "kept files"
python3 - "$RUNS/gpu-matrix/results.json" <<'EOF' | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
for c in d["cases"]:
    k, lat = c["case"], c.get("latency") or {}
    print(f"{k['model']:14s} {k['runtime']:11s} {k['precision']:5s} b{k['batch']:<3d} {c['status']:8s} "
          f"p50 {lat.get('p50_ms', float('nan')):8.3f} gpu_peak_mb {c.get('gpu_peak_mb')} "
          f"rel_l2 {(c.get('accuracy') or {}).get('rel_l2')} {c['reason'][:70]}")
EOF
keep
ls -la "$OUT" "$RUNS"
echo "done at ${SECONDS}s"
