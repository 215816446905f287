"""The `gpudiag` command. Thin: each subcommand (diagnose/commands/<name>.py) validates
its arguments, calls the library, and prints what it wrote. Bad input → exit 2 with a
message naming the file, never a traceback (``--debug`` shows one)."""

from __future__ import annotations

import sys

import click

from diagnose.version import __version__
from parsers.errors import InputError

EXIT_BAD_INPUT = 2


class GpudiagGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"gpudiag: error: {e}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except MemoryError:
            click.echo("gpudiag: error: ran out of memory reading the input", err=True)
            ctx.exit(EXIT_BAD_INPUT)


@click.group(cls=GpudiagGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpudiag")
@click.option("--debug", is_flag=True, help="Show Python tracebacks for errors.")
@click.pass_context
def main(ctx, debug):
    """Profile a PyTorch or JAX training script and diagnose what holds it back.

    \b
    gpudiag profile -- python train.py            capture a run folder (light mode)
    gpudiag profile --ncu -- python train.py      the same under Nsight Compute
    gpudiag report RUN_OR_FILE -o r.html          one offline HTML page, findings first
    gpudiag check RUN_OR_FILE --fail-on critical  CI gate: exit 1 when a finding reaches a level
    gpudiag diff RUN_A RUN_B -o diff.html         what changed between two runs
    gpudiag sweep --grid bs=8,16 -- python train.py --bs {bs}   memory against throughput
    gpudiag completion bash                       a shell completion script

    RUN_OR_FILE is a run folder or one artifact: an .ncu-rep, an ncu CSV export,
    a PyTorch/JAX profiler trace, a torch memory snapshot. Formats are detected
    from the content.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    import importlib
    import pkgutil

    import diagnose.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"diagnose.commands.{info.name}")
        main.add_command(mod.command)


_register()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
