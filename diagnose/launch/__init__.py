"""Launching a training script under gpudiag: light instrumentation (default) or Nsight Compute.

The parent side (api, light, ncu, nvml_sampler, run_dir, run_manifest, supervisor,
progress) runs in the `gpudiag profile` process. The child side (sitecustomize/ and the
runtime/ package, the bootstrap) runs inside the user's training process and imports only
the standard library until the user imports torch or jax. Both sides use child_config (the
environment variables between them), event_log (append-only files), fault_reports (faults
sent to the parent) and fault_injection (the fault tests' hook).
"""
