"""CPU tests of `gpudiag profile` (diagnose/launch)."""
