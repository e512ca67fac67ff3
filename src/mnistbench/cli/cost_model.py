"""``mnistbench cost-model``: the resolved cost model written as JSON
(:func:`mnistbench.steps.write_cost_model`: what the workflow's cost_model job runs)."""

from __future__ import annotations

from mnistbench.cli.common import CliError
from mnistbench.core.options import path_of


def register(sub) -> None:
    p = sub.add_parser(
        "cost-model", help="write the resolved cost model (every default filled) as JSON",
        description="Check a cost model (the workflow's config key cost) against "
        "cost_model.schema.yaml, fill every key left out with its default, and write it to "
        "--out atomically as the JSON that `mnistbench report --cost-model` reads "
        "(mnistbench.steps: what the workflow's cost_model job does).")
    p.add_argument("--config-json", required=True, metavar="JSON_OR_FILE",
                   help="the model as a JSON object ({...}), or a file holding it (JSON by a "
                   ".json suffix, else YAML); {} gives the built-in model")
    p.add_argument("--source", default=None,
                   help="what the model is called in error messages (default: the file, or "
                   "--config-json)")
    p.add_argument("--out", type=path_of, required=True, help="the JSON file to write")
    p.set_defaults(func=command, cleans_up=True)


def command(args) -> int:
    from mnistbench import steps

    try:
        print(steps.write_cost_model(args.out, args.config_json, source=args.source))
    except steps.StepError as exc:
        raise CliError(str(exc)) from None
    return 0
