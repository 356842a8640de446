#!/usr/bin/env bash
# Runs Steward's real-GPU checks on a machine with an NVIDIA GPU and
# PyTorch but no Go: the bundle `make gpu-bundle` builds (bin/gpu) holds the
# Nomad agent, steward, the plugins and the two test binaries built with
# -tags gpu. Output and logs go to $1 (default ./gpu-check-out).
#
#   make gpu-bundle                          # on the build machine
#   tools/gpucheck/run.sh OUTDIR             # on the GPU machine, from the repository root
set -u -o pipefail
out=${1:-gpu-check-out}
mkdir -p "$out"
root=$(pwd)
work=$(mktemp -d)
python3 -c 'import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' bin/gpu/bundle.tar.xz "$work" || exit 1
bins=$work/bundle
python=$(command -v python3)
{
  echo "== machine"; uname -a; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,utilization.gpu --format=csv
  echo "python3: $python"
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0))'
} 2>&1 | tee "$out/machine.txt"

status=0
cat >"$work/load.py" <<'PY'
import time, torch
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + 60
while time.time() < end:
    b = a @ a
    torch.cuda.synchronize()
PY
load="$python $work/load.py"
echo "== devices: TestRealNVML" | tee "$out/devices.txt"
(cd "$root/devices" && STEWARD_GPU_LOAD="$load" timeout 120 "$bins/devices.test" -test.run '^TestRealNVML$' -test.v -test.count=1) >>"$out/devices.txt" 2>&1 || status=1
tail -40 "$out/devices.txt"

export STEWARD_NOMAD_BIN=$bins/nomad STEWARD_PLUGIN_DIR=$bins/plugins STEWARD_BIN=$bins/steward STEWARD_GPU_PYTHON=$python
mkdir -p "$work/logs"; export STEWARD_E2E_LOGDIR=$work/logs
for driver in ${STEWARD_GPU_DRIVERS:-steward-exec raw_exec}; do
  echo "== e2e: TestRealGPUIdleReclaim with $driver" | tee "$out/e2e-$driver.txt"
  (cd "$root/e2e" && STEWARD_GPU_DRIVER=$driver timeout 200 "$bins/e2e.test" -test.run '^TestRealGPUIdleReclaim$' -test.v -test.count=1 -test.timeout 190s) >>"$out/e2e-$driver.txt" 2>&1 
  if grep -q '^--- PASS' "$out/e2e-$driver.txt"; then tail -60 "$out/e2e-$driver.txt"; status_e2e=0; break; fi
  status_e2e=1; tail -60 "$out/e2e-$driver.txt"
  echo "(failed with $driver: trying the next driver, to tell the device plugin's path from the driver's)"
done
[ "${status_e2e:-1}" = 0 ] || status=1
tar -C "$work/logs" -czf "$out/agent-logs.tar.gz" . 2>/dev/null
echo "gpu-check status $status"
exit $status
