"""Hand-made test script: torch work with no optimizer, no backward, no marker (an inference-style loop).

argv: seconds [marker] [cuda]. Nothing ends a step, so only gpudiag's time slices can; with "marker", each
iteration calls diagnose.step(); with "cuda", the work runs on the GPU."""

import sys
import time

import torch

seconds = float(sys.argv[1])
marker = "marker" in sys.argv[2:]
device = "cuda" if "cuda" in sys.argv[2:] else "cpu"
if marker:
    import diagnose
a = torch.randn(256, 256, device=device)
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    a = torch.tanh(a @ a.T / 256)
    n += 1
    if marker:
        diagnose.step()
print(f"{n} iterations", flush=True)
