"""Hand-made test script: prints what the interpreter shows a script (path, name, argv, modules) as JSON."""

import json
import os
import sys

runtime = sys.modules.get("diagnose.launch.runtime.lifecycle")
print(
    "GPUDIAG-REPORT "
    + json.dumps(
        {
            "path0": sys.path[0],
            "path": sys.path,
            "name": __name__,
            "argv": sys.argv,
            "file": os.path.abspath(__file__),
            "heavy_modules": sorted(m for m in ("pandas", "numpy", "torch", "jax", "diagnose") if m in sys.modules),
            "bootstrap_active": bool(runtime and runtime.active()),
            "user_sitecustomize_ran": os.environ.get("USER_SITECUSTOMIZE_RAN") == "1",
        }
    )
)
