"""Hand-made test script: 16 optimizer steps on the CPU (through the default trace window, steps 10-12),
then prints which heavy modules the process holds and whether gpudiag's runtime is still on."""

import json
import sys

import torch

model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(16):
    opt.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
runtime = sys.modules.get("diagnose.launch.runtime.lifecycle")
print(
    "GPUDIAG-MODULES "
    + json.dumps(
        {
            "pandas": "pandas" in sys.modules,
            "diagnose": "diagnose" in sys.modules,
            "parsers": "parsers" in sys.modules,  # run_records is loaded by its file, not through the package
            "run_records": "parsers.run_records" in sys.modules,
            "active": bool(runtime and runtime.active()),
        }
    )
)
