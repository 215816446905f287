"""Run HTA (in its own venv) on one trace and print its load time, peak RSS and breakdowns as JSON.

Run by ``benchmarks/trace_load.py`` as a subprocess with HTA's interpreter
(``/work/venvs/hta/bin/python benchmarks/hta_reference.py TRACE``), so HTA's
pandas never mixes with the project's and its peak memory is its own process's.
"""

import json
import os
import resource
import shutil
import sys
import tempfile
import time


def main(path: str, breakdown: bool = True) -> None:
    from hta.trace_analysis import TraceAnalysis

    folder = tempfile.mkdtemp(prefix="hta-ref-")
    name = "rank-0" + (".json.gz" if path.endswith(".gz") else ".json")
    os.symlink(os.path.abspath(path), os.path.join(folder, name))
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=folder)
    load_s = time.perf_counter() - t0
    out = {"load_s": load_s}
    if breakdown:
        t1 = time.perf_counter()
        temporal = analysis.get_temporal_breakdown(visualize=False)
        rank = int(temporal["rank"].iloc[0])
        idle, _ = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)
        out["breakdown_s"] = time.perf_counter() - t1
        out["temporal"] = json.loads(temporal.to_json(orient="records"))
        out["idle"] = json.loads(idle.to_json(orient="records"))
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    shutil.rmtree(folder, ignore_errors=True)
    print("HTA_RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], breakdown="--load-only" not in sys.argv)
