"""`gpudiag completion SHELL`: print the shell's completion script (click's own; no extra dependency).

    eval "$(gpudiag completion bash)"      # in ~/.bashrc
    eval "$(gpudiag completion zsh)"       # in ~/.zshrc
    gpudiag completion fish > ~/.config/fish/completions/gpudiag.fish

The script asks `gpudiag` itself for candidates (environment variable ``_GPUDIAG_COMPLETE``), so it
completes subcommands, options and choices of the installed version.
"""

from __future__ import annotations

import click

PROG_NAME = "gpudiag"
COMPLETE_VAR = "_GPUDIAG_COMPLETE"  # what click's main() reads for prog_name "gpudiag"


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def command(shell):
    """Print the shell completion script (bash, zsh or fish).

    \b
    eval "$(gpudiag completion bash)"     # in ~/.bashrc
    eval "$(gpudiag completion zsh)"      # in ~/.zshrc
    """
    from click.shell_completion import get_completion_class

    root = click.get_current_context().find_root().command
    script = get_completion_class(shell)(root, {}, PROG_NAME, COMPLETE_VAR).source()
    click.echo(script, nl=not script.endswith("\n"))
