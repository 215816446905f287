"""Print HTA's comm/compute overlap for a set of traces, as JSON (run with HTA's own interpreter).

    /work/venvs/hta/bin/python tests/comm/hta_overlap_reference.py TRACE [TRACE ...]

The traces are symlinked into one temporary folder (HTA reads the rank from each
trace's distributedInfo) and ``TraceAnalysis.get_comm_comp_overlap`` is called.
The numbers it printed are stored in ``tests/comm/test_comm_hta.py``.
"""

import json
import os
import shutil
import sys
import tempfile


def main(paths: list[str]) -> None:
    from hta.trace_analysis import TraceAnalysis

    folder = tempfile.mkdtemp(prefix="hta-comm-")
    for i, path in enumerate(paths):
        os.symlink(os.path.abspath(path), os.path.join(folder, f"rank-{i}.json.gz"))
    try:
        analysis = TraceAnalysis(trace_dir=folder)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("HTA_RESULT " + json.dumps(json.loads(overlap.to_json(orient="records"))))


if __name__ == "__main__":
    main(sys.argv[1:])
