"""Hypothesis profiles for the fuzz tests, chosen by ``GPUDIAG_FUZZ_PROFILE`` (default ``ci``).

* ``ci``: a few seeded examples per reader and mutation kind, the whole folder in well under a
  minute on a 2-core machine; derandomized, so every run tries the same inputs.
* ``long``: hundreds of examples each (``GPUDIAG_FUZZ_PROFILE=long pytest tests/fuzz``), still
  derandomized; tools/fuzz_campaign.py is the longer campaign with its own seeded loop.

Each example also runs under a hard time limit (``tests.fuzz.HARD_LIMIT_S``, enforced in
tests/fuzz/oracle.py) so a hang fails instead of blocking. There is no hypothesis deadline: an example
that is merely slow on a busy machine is no failure (how fast the readers are is measured in benchmarks/).
The profiles are registered here and applied by the tests through :func:`tests.fuzz.fuzz_settings`, not
loaded globally, so the suite's other hypothesis tests keep their own settings.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
settings.register_profile("ci", max_examples=6, deadline=None, **_COMMON)
settings.register_profile("long", max_examples=400, deadline=None, **_COMMON)


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    """One folder per test module for the mutated inputs (each example gets a fresh subfolder)."""
    return tmp_path_factory.mktemp("fuzz")
