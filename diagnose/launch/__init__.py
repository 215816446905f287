"""Launching a training script under gpudiag: light instrumentation (default) or Nsight Compute.

The parent side (api, light, ncu, nvml_sampler, run_folder, run_manifest, supervisor,
progress) runs in the `gpudiag profile` process. The child side (sitecustomize/,
bootstrap_runtime and the modules it loads: child_config, event_log, nvtx_ranges,
sync_capture, trace_window, memory_capture, exit_hooks) runs inside the user's training
process and imports only the standard library until the user imports torch or jax.
"""
