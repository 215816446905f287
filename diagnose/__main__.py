"""``python -m diagnose ...`` is the `gpudiag` command (for machines where gpudiag is not pip-installed)."""

import sys

from diagnose.cli import main

if __name__ == "__main__":
    sys.exit(main(prog_name="gpudiag"))
