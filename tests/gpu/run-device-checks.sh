#!/usr/bin/env bash
# The one-GPU checks, in one go: under 8 minutes on one H100 or H200 (each step has its own timeout, 7.5 min in all):
# the GPU tests, then `pipedit bench kernels` for the released widths at 480p and 720p (and
# HunyuanVideo at 1280x720x129), written as JSON and text beside a calibration file for
# `pipedit plan --calibration`. Usage: tests/gpu/run-device-checks.sh [OUT_DIR] (default outputs/device-checks).
set -u
out=${1:-outputs/device-checks}
mkdir -p "$out"
python=${PYTHON:-python}
status=0
timeout 250 "$python" -m pytest tests/gpu -m gpu -q -s 2>&1 | tee "$out/pytest.txt" || status=1
models=hunyuan-video,hunyuan-video-1.5,wan-14b,wan-1.3b,opensora-plan
kernels_flag=()
[ -n "${KERNELS:-}" ] && kernels_flag=(--kernels "$KERNELS")
timeout 140 "$python" -m pipedit.cli bench kernels --models "$models" "${kernels_flag[@]}" --json \
    --write-calibration "$out/calibration.json" > "$out/kernels.json" || status=1
timeout 60 "$python" -m pipedit.cli bench kernels --models hunyuan-video --shapes 1280x720x129 "${kernels_flag[@]}" \
    --json > "$out/kernels-hunyuan-720x1280x129.json" || status=1
for report in "$out"/kernels*.json; do
    "$python" -c "import json, sys; from pipedit.bench.kernels import format_report; \
print(format_report(json.load(open(sys.argv[1]))))" "$report" | tee "${report%.json}.txt"
done
exit $status
