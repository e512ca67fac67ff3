"""``mnistbench env`` (the environment capture every summary records, or torch's collect_env
report) and ``mnistbench env-name`` (the environment folder results are filed under,
:func:`mnistbench.core.study.environment_name`)."""

from __future__ import annotations

import json

from mnistbench.cli.common import CliError
from mnistbench.core.options import path_of


def register(sub) -> None:
    p = sub.add_parser("env", help="print the environment capture as JSON",
                       description="Print what every summary records about the machine: "
                       "versions, CPU (model, ISA, bf16 path, oneDNN/MKL), GPU, OS, host and "
                       "git revision.")
    p.add_argument("--collect-env", type=path_of, default=None, metavar="FILE",
                   help="instead, write torch's collect_env report to FILE (each cell writes "
                   "it once per environment as results/runs/ENV/collect_env.txt)")
    p.set_defaults(func=env_command)

    p = sub.add_parser("env-name", help="print the environment name results are filed under",
                       description="Print the name of this environment (a folder under "
                       "results/runs): $MNISTBENCH_ENV, else the host name and the runtime, "
                       "e.g. myhost-local or myhost-docker-mnistbench-cpu (mnistbench.core.study).")
    p.add_argument("--runtime", choices=["local", "docker", "apptainer"], default=None,
                   help="the runtime of the cells instead of this process's own")
    p.set_defaults(func=env_name_command)


def env_command(args) -> int:
    if args.collect_env is not None:
        from mnistbench.measure import hardware

        try:
            print(hardware.save_collect_env(args.collect_env))
        except OSError as exc:
            raise CliError(f"cannot write {args.collect_env}: {exc}") from None
        return 0
    from mnistbench.measure import sysinfo

    print(json.dumps(sysinfo.capture(), indent=2, sort_keys=True, allow_nan=False))
    return 0


def env_name_command(args) -> int:
    from mnistbench.core import study

    print(study.environment_name(runtime=args.runtime))
    return 0
