"""gpudiag's version: one place, read by setup.cfg, the manifest, the findings JSON and `--version`."""

__version__ = "0.1.0"
