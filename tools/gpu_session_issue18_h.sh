#!/usr/bin/env bash
# Device call (nvidia-h200) for issue 18, 2026-12-04 evening: a new input shape under cudnn.benchmark on the GPU.
# Usage: OUT=/dir TOTAL_S=300 bash tools/gpu_session_issue18_h.sh
source tools/gpu_session_common.sh
log "1. tests/gpu/test_new_shape_gpu.py"
timeout -k 5 150 python3 -m pytest tests/gpu/test_new_shape_gpu.py -m gpu -s -q -p no:cacheprovider --durations=0 > $L/new_shape.log 2>&1
echo "rc=$?"; grep -E "summary row|new-shape step|passed|failed|^E " $L/new_shape.log | cut -c1-500 | tail -10
log "2. the same script, its report"
timeout -k 5 90 python3 -m diagnose profile -q -o $R/cudnn_new_shape -- python3 examples/cudnn_new_shape.py --device cuda --epochs 4 > $L/cudnn_run.log 2>&1
echo "rc=$?"; timeout 60 python3 -m diagnose report $R/cudnn_new_shape --json $R/cudnn_new_shape.json > /dev/null 2>&1
python3 -c "
import json; d = json.load(open('$R/cudnn_new_shape.json'))
for f in d['findings'][:5]: print(' ', f['id'], round(f.get('cost_share') or 0, 3), f['title'][:300])
"
grep '"new-shape"' $R/cudnn_new_shape/events/rank0.jsonl | head -3
tar -czf $OUT/results.tgz -C /tmp results
log done
