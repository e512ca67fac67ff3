"""``mnistbench completion bash|zsh``: the shell completion script made from the command's
own parser (:mod:`mnistbench.completion`)."""

from __future__ import annotations

from mnistbench.core import untrusted


def register(sub) -> None:
    p = sub.add_parser(
        "completion", help="print the shell completion script (bash or zsh)",
        description="Print a completion script of the mnistbench command for SHELL, made "
        "from its own parser: subcommands, flags, the allowed values of a flag, file names "
        "where a flag takes a path. bash: `mnistbench completion bash > "
        "~/.local/share/bash-completion/completions/mnistbench`, or `source <(mnistbench "
        "completion bash)` in ~/.bashrc; zsh: `source <(mnistbench completion zsh)` in "
        "~/.zshrc after compinit.")
    p.add_argument("shell", choices=("bash", "zsh"), help="the shell")
    p.set_defaults(func=command)


def command(args) -> int:
    """The script of ``args.root_parser``: the whole command's parser, which
    :func:`mnistbench.cli.build_parser` puts in every namespace it parses."""
    from mnistbench import completion

    untrusted.write_stdout(completion.script(args.root_parser, args.shell), "the script")
    return 0
