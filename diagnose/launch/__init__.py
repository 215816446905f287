"""Launching a training script under gpudiag: light instrumentation (default) or Nsight Compute.

The parent side runs in the `gpudiag profile` process: api (``diagnose.profile``), launcher (one run
from start to end), one module per capture mode (light_mode, ncu_mode; what they share: capture_mode),
ncu_command (the ncu command line, its log and export), nvml_sampler, run_dir, run_manifest,
host_environment, run_progress and supervisor (the child's process group, signals and exit status).
The child side (sitecustomize/ and the runtime/ package, the bootstrap) runs inside the user's training
process and imports only the standard library until the user imports torch or jax. Both sides use
child_config (the environment variables between them), event_log (append-only files), fault_reports
(faults sent to the parent) and fault_injection (the fault tests' hook).
"""
