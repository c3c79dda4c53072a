#!/usr/bin/env bash
# The one-GPU checks, in one go, each step with its own timeout (500 s in all): the GPU tests, then
# `pipedit bench kernels` for the released widths at 480p and 720p (and HunyuanVideo at
# 1280x720x129), written as JSON and text beside a calibration file for `pipedit plan --calibration`;
# each step's errors go to a .err file beside its output. Measured on one H200: the tests 151 s, the
# bench of one model (wan-1.3b, 20 rows) 87 s, so MODELS (comma-separated) defaults to two of them;
# the five released widths take about 7 minutes on their own.
# Usage: [MODELS=...] [KERNELS=...] tests/gpu/run-device-checks.sh [OUT_DIR] (default outputs/device-checks).
set -u
out=${1:-outputs/device-checks}
mkdir -p "$out"
python=${PYTHON:-python}
status=0
timeout 200 "$python" -m pytest tests/gpu -m gpu -q -s 2>&1 | tee "$out/pytest.txt" || status=1
models=${MODELS:-hunyuan-video,wan-1.3b}
kernels_flag=()
[ -n "${KERNELS:-}" ] && kernels_flag=(--kernels "$KERNELS")
timeout 200 "$python" -m pipedit.cli bench kernels --models "$models" "${kernels_flag[@]}" --json \
    --write-calibration "$out/calibration.json" > "$out/kernels.json" 2> "$out/kernels.err" || status=1
timeout 100 "$python" -m pipedit.cli bench kernels --models hunyuan-video --shapes 1280x720x129 "${kernels_flag[@]}" \
    --json > "$out/kernels-hunyuan-720x1280x129.json" 2> "$out/kernels-hunyuan-720x1280x129.err" || status=1
for report in "$out"/kernels*.json; do
    [ -s "$report" ] || { echo "$report is empty: see ${report%.json}.err"; continue; }
    "$python" -c "import json, sys; from pipedit.bench.kernels import format_report; \
print(format_report(json.load(open(sys.argv[1]))))" "$report" | tee "${report%.json}.txt"
done
exit $status
