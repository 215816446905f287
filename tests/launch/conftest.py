"""Fixtures of the launch tests (helpers live in tests/launch/launch_helpers.py)."""
from tests.launch.launch_helpers import run_dir  # noqa: F401  (fixture)
