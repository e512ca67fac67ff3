"""What a training run costs on each device, and when a GPU pays for itself.

The cost model is a YAML or JSON document, defined once (keys, units, allowed values and
defaults) in ``cost_model.schema.yaml`` beside this module: :data:`DEFAULT_MODEL` is its
defaults, :func:`validate` checks a document against it and fills the keys left out, and the
workflow's config schema takes it as its ``cost`` key::

    currency: EUR              # printed after every amount
    price_per_kwh: 0.30        # currency per kWh of electricity
    runs: 100                  # N: the table also shows the cost of N runs
    wait_value_per_hour: 20.0  # currency per hour of waiting for a result (0: time is free)
    target_accuracy: 98.0      # %, test accuracy of the "cost to reach the target" column
    devices:
      cpu:
        system_power_w: 180      # W, whole-system wall power while training, used when the
                                 #   study measured no energy
        unmeasured_power_w: 60   # W, added to measured counters for what they do not see
        hardware_price: 1200     # currency, the machine a CPU run occupies
        life_years: 4            # years over which the hardware is written off
        hours_per_year: 2000     # h of use per year
      cuda:
        system_power_w: 600
        unmeasured_power_w: 120
        hardware_price: 3000     # the same machine with the GPU in it
        life_years: 4
        hours_per_year: 2000

Per environment, device and loader, from the convergence cells (the blog's settings), with
medians over repeats:

- time per run: ``timed_s + warmup_s + overhead_s`` (the whole process: start-up, data,
  warm-up, the timed epochs, writing), measured;
- energy per run: when the counters were read (``gpu_energy_j`` for cuda, ``cpu_energy_j``
  for cpu; on cuda ``cpu_energy_j`` is added when present), their average power over the
  timed epochs plus ``unmeasured_power_w``, times the run time (measured + assumed: mixed);
  else ``system_power_w`` times the run time (an assumed power times a measured time: mixed
  too). A GPU's board counter alone is not the whole system: the CPU feeding it, RAM, board,
  fans and PSU losses are the remainder;
- electricity: energy in kWh x ``price_per_kwh``;
- hardware: ``hardware_price / (life_years x hours_per_year)`` per hour of run time (an
  assumed rate times a measured time: mixed);
- waiting: ``wait_value_per_hour`` per hour of run time (mixed, likewise);
- total per run and for ``runs`` runs;
- cost to reach ``target_accuracy``: the same rates over the time until the end of the
  first epoch whose test accuracy reaches the target (plus the run's overhead), median
  over repeats; "not reached" when most repeats never reach it;
- break-even (per environment and loader): runs after which the GPU machine's extra price,
  ``cuda.hardware_price - cpu.hardware_price``, is paid back by what each GPU run saves in
  electricity (and, second figure, electricity plus waiting): ``extra / saving per run``;
  never (infinite) when the GPU run is not cheaper.

Every figure carries its basis: ``measured`` (clocks and counters of the study),
``assumed`` (inputs of the cost model) or ``mixed`` (both: any assumed power or rate times a
measured time).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import yaml

from mnistbench.core import untrusted

MEASURED = "measured"
ASSUMED = "assumed"
MIXED = "mixed"

#: The cost model's JSON schema (YAML), the one definition of its keys and defaults.
SCHEMA: dict = yaml.safe_load(
    resources.files(__package__).joinpath("cost_model.schema.yaml").read_text(encoding="utf-8"))
COST_DEVICES = tuple(SCHEMA["properties"]["devices"]["properties"])
#: key -> meaning (with its unit), from the schema's descriptions, for the report.
TOP_KEYS: dict[str, str] = {key: " ".join(spec["description"].split())
                            for key, spec in SCHEMA["properties"].items()}
DEVICE_KEYS: dict[str, str] = {
    key: " ".join(spec["description"].split()).replace(" on cpu", "")
    for key, spec in SCHEMA["properties"]["devices"]["properties"]["cpu"]["properties"].items()}


def _validator():
    """A validator of :data:`SCHEMA` that also fills every default it passes."""
    from jsonschema import Draft202012Validator, validators

    check_properties = Draft202012Validator.VALIDATORS["properties"]

    def fill_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, spec in properties.items():
                if "default" in spec:
                    instance.setdefault(name, copy.deepcopy(spec["default"]))
        yield from check_properties(validator, properties, instance, schema)

    return validators.extend(Draft202012Validator, {"properties": fill_defaults})(SCHEMA)


def resolve(data: object, source: str = "built-in default") -> dict:
    """``data`` checked against :data:`SCHEMA`, with every key left out set to its default
    (a new dict); :class:`CostError` names the first bad key, what it must be and the fix."""
    from jsonschema.exceptions import best_match

    if not isinstance(data, Mapping):
        raise CostError(f"cost model {source}: must be a mapping with the keys "
                        f"{', '.join(TOP_KEYS)}, got {type(data).__name__} (see docs/report.md "
                        "for a complete model to start from).")
    filled = copy.deepcopy(dict(data))
    error = best_match(_validator().iter_errors(filled))
    if error is not None:
        key = ".".join(str(part) for part in error.absolute_path) or "(top level)"
        wanted = error.schema.get("description", "") if isinstance(error.schema, dict) else ""
        if error.validator == "additionalProperties":
            allowed = error.schema.get("properties", {})
            wanted = f"allowed keys: {', '.join(allowed)}"
        raise CostError(
            f"cost model {source}: key {key}: {error.message}"
            + (f" (expected: {' '.join(wanted.split())})" if wanted else "")
            + ". Fix that key (docs/report.md describes the model).")
    return filled


class CostError(ValueError):
    """The cost model file is missing or invalid; the message names the key and the fix."""


#: The built-in cost model: every default of :data:`SCHEMA` (an i7-12700K desktop, and the
#: same desktop with an RTX 4090).
DEFAULT_MODEL: dict = resolve({})


@dataclass(frozen=True)
class DeviceCost:
    """Cost inputs of one device (see :data:`DEVICE_KEYS` for units)."""

    system_power_w: float
    unmeasured_power_w: float
    hardware_price: float
    life_years: float
    hours_per_year: float

    @property
    def hardware_per_hour(self) -> float:
        """Hardware write-off per hour of use, currency/h."""
        return self.hardware_price / (self.life_years * self.hours_per_year)


@dataclass(frozen=True)
class CostModel:
    """A validated cost model."""

    currency: str
    price_per_kwh: float
    runs: int
    wait_value_per_hour: float
    target_accuracy: float
    devices: dict[str, DeviceCost]
    source: str = "built-in default"
    #: "purchase" (write-off) or "cloud" (a kind's price per hour) and the prices per kind.
    pricing: str = "purchase"
    kinds: dict[str, Kind] = field(default_factory=dict)

    def as_rows(self) -> list[tuple[str, str, str]]:
        """(key, value, meaning) of every input, for the report."""
        rows = [(k, str(getattr(self, k)), TOP_KEYS[k]) for k in TOP_KEYS
                if k not in ("devices", "kinds")]
        for device, values in self.devices.items():
            rows += [(f"devices.{device}.{k}", f"{getattr(values, k):g}", v)
                     for k, v in DEVICE_KEYS.items()]
        for name, kind in self.kinds.items():
            rows.append((f"kinds.{name}", f"{kind.hardware_price:g} to buy, "
                         f"{kind.cloud_per_hour:g} an hour in a cloud ({kind.date})",
                         kind.source))
        return rows

    def kind_of(self, device: str, names) -> tuple[str, Kind] | None:
        """The priced kind of a row on ``device`` whose cells name ``names`` (GPU names): the
        first kind whose name occurs in one of them, for the CPU the kind ``cpu``."""
        if device == "cpu":
            return ("cpu", self.kinds["cpu"]) if "cpu" in self.kinds else None
        for name, kind in self.kinds.items():
            if name != "cpu" and any(name.lower() in str(n).lower() for n in names):
                return name, kind
        return None

    def hardware_rate(self, device: str, names=()) -> tuple[float, float, str]:
        """(currency per hour of use, machine price, what they rest on) of a run on
        ``device`` with GPUs ``names``: a kind's cloud price per hour when pricing is cloud
        and the kind has one, else its machine price (or devices.*.hardware_price) written
        off over the device's life of use."""
        dev = self.devices[device]
        found = self.kind_of(device, names)
        if found is None:
            return (dev.hardware_per_hour, dev.hardware_price,
                    f"devices.{device}.hardware_price {dev.hardware_price:g}, written off")
        name, kind = found
        if self.pricing == "cloud":
            return (kind.cloud_per_hour, kind.hardware_price,
                    f"{name}: {kind.cloud_per_hour:g} an hour in a cloud ({kind.date})")
        return (kind.hardware_price / (dev.life_years * dev.hours_per_year),
                kind.hardware_price,
                f"{name}: {kind.hardware_price:g} to buy ({kind.date}), written off")


@dataclass(frozen=True)
class Kind:
    """The prices of one kind of device, dated and sourced (see the schema's ``kinds``)."""

    hardware_price: float
    cloud_per_hour: float
    date: str
    source: str


def validate(data: object, source: str = "built-in default") -> CostModel:
    """Check a parsed cost model document (keys left out take their defaults) and return it as
    a :class:`CostModel`; raise :class:`CostError` naming the first bad key."""
    model = resolve(data, source)
    return CostModel(
        currency=model["currency"].strip(),
        price_per_kwh=float(model["price_per_kwh"]),
        runs=int(model["runs"]),
        wait_value_per_hour=float(model["wait_value_per_hour"]),
        target_accuracy=float(model["target_accuracy"]),
        devices={device: DeviceCost(**{k: float(v) for k, v in model["devices"][device].items()})
                 for device in COST_DEVICES},
        source=source,
        pricing=model["pricing"],
        kinds={name: Kind(float(k["hardware_price"]), float(k["cloud_per_hour"]),
                          str(k["date"]), " ".join(str(k["source"]).split()))
               for name, k in model["kinds"].items()},
    )


def load_model(path: Path | None) -> CostModel:
    """The cost model in ``path`` (YAML, or JSON by a ``.json`` suffix), or
    :data:`DEFAULT_MODEL` when ``path`` is None."""
    if path is None:
        return validate(DEFAULT_MODEL)
    return validate(read_model_file(path), str(path))


def parse_model_text(text: str, source: str) -> object:
    """The JSON object ``text`` (``--config-json {...}``), parsed bounded (nesting, size):
    :class:`CostError` naming ``source`` otherwise, never a RecursionError."""
    try:
        untrusted.check_json_depth(text)
        data = json.loads(text)
        untrusted.check_tree(data, what=f"cost model {source}")
    except untrusted.TooComplex as exc:
        raise CostError(f"{exc if 'cost model' in str(exc) else f'cost model {source}: {exc}'}"
                        ". A cost model is a few keys deep (docs/report.md).") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise CostError(f"cost model {source} is not valid JSON: {exc}. Pass a JSON object, "
                        "or the path of a file holding one.") from None
    return data


#: The fix of a cost model file that cannot be used, by the flag that named it.
_BUILT_IN = {"--cost-model": "leave --cost-model out to use the built-in model",
             "--config-json": "pass --config-json '{}' for the built-in model"}


def read_model_file(path: Path | str, flag: str = "--cost-model") -> object:
    """The document in the cost model file ``path`` (YAML, or JSON by a ``.json`` suffix),
    read bounded (a regular file of at most 4 MiB, nesting and aliases capped), not yet
    checked against the schema: :class:`CostError` naming the file and the fix otherwise (a
    folder, an empty file, a syntax error, too deep), never its content nor a traceback.
    ``flag``: the option that named the file (``--cost-model``, ``--config-json``)."""
    import yaml

    path = Path(path)
    try:
        text = untrusted.read_text_file(path)
    except untrusted.UnsafeFile as exc:
        raise CostError(f"cannot read the cost model {path}: {exc.why}. Pass an existing "
                        f"YAML/JSON file to {flag}, or {_BUILT_IN[flag]}.") from None
    kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
    try:
        if kind == "JSON":
            untrusted.check_json_depth(text)
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
        untrusted.check_tree(data, what=f"cost model {path}")
    except untrusted.TooComplex as exc:
        raise CostError(f"{exc if 'cost model' in str(exc) else f'cost model {path}: {exc}'}. "
                        "A cost model is a few keys deep (docs/report.md).") from None
    except RecursionError:
        raise CostError(f"cost model {path} nests deeper than its parser reaches; a cost model "
                        "is a few keys deep (docs/report.md).") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = (f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None
                 else f"line {getattr(exc, 'lineno', '?')}, column {getattr(exc, 'colno', '?')}")
        raise CostError(f"cost model {path} is not valid {kind} ({where}: "
                        f"{getattr(exc, 'problem', None) or getattr(exc, 'msg', 'syntax')}). "
                        "Fix the syntax.") from None
    if data is None:  # an empty file, or only comments: "got NoneType" says too little
        raise CostError(f"cost model {path} is empty (no keys). Give a complete model "
                        f"(docs/report.md has one to start from), or {_BUILT_IN[flag]}.")
    return data


@dataclass(frozen=True)
class Figure:
    """One number of the cost table with its basis (measured, assumed or mixed)."""

    value: float | None
    basis: str


@dataclass(frozen=True)
class CostRow:
    """Cost of one run on one device with one loader in one environment."""

    env: str
    device: str
    loader: str
    n: int
    run_s: Figure
    energy_wh: Figure
    energy_note: str
    electricity: Figure
    hardware: Figure
    waiting: Figure
    total: Figure
    total_n: Figure
    target_s: Figure
    target_epoch: float | None
    target_cost: Figure
    #: what the hardware's hourly rate rests on (the kind, its price and date), the price of
    #: the machine the run occupies, and the timed epochs of a run (for the cost per epoch)
    hardware_note: str = ""
    machine_price: float | None = None
    epochs: float | None = None


@dataclass(frozen=True)
class BreakEven:
    """Runs after which the GPU machine's extra price is paid back (inf: never)."""

    env: str
    loader: str
    extra_price: float
    saving_electricity: float
    runs_electricity: float
    saving_with_waiting: float
    runs_with_waiting: float


@dataclass
class CostReport:
    """Every cost row and break-even figure, plus why some are missing."""

    model: CostModel
    rows: list[CostRow] = field(default_factory=list)
    break_even: list[BreakEven] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _rates(model: CostModel, device: str, power_w: float, seconds: float,
           hardware_per_hour: float | None = None) -> tuple[float, float, float, float]:
    """(energy Wh, electricity, hardware, waiting) of ``seconds`` at ``power_w`` (the hardware
    at ``hardware_per_hour``, by default the device's write-off)."""
    dev = model.devices[device]
    hours = seconds / 3600.0
    energy_wh = power_w * hours
    rate = dev.hardware_per_hour if hardware_per_hour is None else hardware_per_hour
    return (energy_wh, energy_wh / 1000.0 * model.price_per_kwh, rate * hours,
            model.wait_value_per_hour * hours)


def average_power(model: CostModel, device: str, cell) -> tuple[float, str, str]:
    """(W, basis, note): the whole-system power of one cell (a summary row) while it ran."""
    dev = model.devices[device]
    timed = cell.get("timed_s")
    counters = {"cuda": ["gpu_energy_j", "cpu_energy_j"], "cpu": ["cpu_energy_j"]}[device]
    main = counters[0]
    main_value = cell.get(main)
    if (main_value is not None and np.isfinite(main_value) and timed is not None
            and np.isfinite(timed) and timed > 0):
        joules = sum(float(cell[c]) for c in counters
                     if cell.get(c) is not None and np.isfinite(cell[c]))
        used = [c for c in counters if cell.get(c) is not None and np.isfinite(cell[c])]
        basis = MEASURED if dev.unmeasured_power_w == 0 else MIXED
        note = (f"measured {' + '.join(used)} + {dev.unmeasured_power_w:g} W assumed for the "
                "rest of the system")
        return joules / timed + dev.unmeasured_power_w, basis, note
    return dev.system_power_w, ASSUMED, f"assumed {dev.system_power_w:g} W system power"


def time_to_target(epochs, target: float) -> tuple[float | None, int | None]:
    """(s of timed epochs, epoch) until the first epoch with test_acc >= target in one cell's
    epoch rows, or (None, None) when it is never reached."""
    ordered = epochs.sort_values("epoch")
    reached = ordered["test_acc"].to_numpy(dtype=float) >= target
    if not reached.any():
        return None, None
    index = int(np.argmax(reached))
    return (float(ordered["epoch_s"].to_numpy(dtype=float)[: index + 1].sum()),
            int(ordered["epoch"].iloc[index]))


def compute(summary, epochs, model: CostModel) -> CostReport:
    """Cost rows per (env, device, loader) of the ok convergence cells, and break-even per
    (env, loader). ``summary``/``epochs``: the aggregated DataFrames."""
    report = CostReport(model=model)
    cells = summary[(summary["experiment"] == "convergence") & (summary["status"] == "ok")
                    & summary["device"].isin(COST_DEVICES)]
    if cells.empty:
        report.notes.append("no ok cells of the convergence experiment: nothing to cost.")
        return report
    by_cell = {key: frame for key, frame in epochs.groupby(["env", "experiment", "cell"])}
    for (env, device, loader), group in cells.groupby(["env", "device", "loader"], sort=True):
        runs, powers, bases, notes, targets, target_epochs = [], [], set(), set(), [], []
        for _, cell in group.iterrows():
            run_s = _run_seconds(cell)
            if run_s is None:
                continue
            power, basis, note = average_power(model, device, cell)
            runs.append(run_s)
            powers.append(power)
            bases.add(basis)
            notes.add(note)
            rows = by_cell.get((env, "convergence", cell["cell"]))
            seconds, epoch = (None, None) if rows is None else time_to_target(
                rows, model.target_accuracy)
            overhead = _finite(cell.get("overhead_s")) + _finite(cell.get("warmup_s"))
            targets.append(math.inf if seconds is None else seconds + overhead)
            target_epochs.append(math.inf if epoch is None else epoch)
        if not runs:
            continue
        run_s = float(np.median(runs))
        power = float(np.median(powers))
        # the power times the measured run time: measured only when the power was
        energy_basis = MEASURED if bases == {MEASURED} else MIXED
        names = sorted({str(n) for n in group.get("gpu_name", []) if isinstance(n, str)})
        rate, machine_price, hardware_note = model.hardware_rate(device, names)
        energy_wh, electricity, hardware, waiting = _rates(model, device, power, run_s, rate)
        total = electricity + hardware + waiting
        target_s = float(np.median(targets))  # inf when most repeats never got there
        if math.isfinite(target_s):
            *_, t_el, t_hw, t_wait = _rates(model, device, power, target_s, rate)
            target_cost = Figure(t_el + t_hw + t_wait, MIXED)
            target_epoch = float(np.median(target_epochs))
            target_time = Figure(target_s, MEASURED)
        else:
            target_cost, target_epoch, target_time = Figure(None, MIXED), None, Figure(None,
                                                                                     MEASURED)
        report.rows.append(CostRow(
            env=str(env), device=str(device), loader=str(loader), n=len(runs),
            run_s=Figure(run_s, MEASURED), energy_wh=Figure(energy_wh, energy_basis),
            energy_note="; ".join(sorted(notes)),
            electricity=Figure(electricity, energy_basis), hardware=Figure(hardware, MIXED),
            waiting=Figure(waiting, MIXED), total=Figure(total, MIXED),
            total_n=Figure(total * model.runs, MIXED), target_s=target_time,
            target_epoch=target_epoch, target_cost=target_cost, hardware_note=hardware_note,
            machine_price=machine_price,
            epochs=float(np.median([float(e) for e in group["epochs"]]))
            if "epochs" in group else None))
    report.break_even = break_even(report.rows, model)
    if not any(r.device == "cuda" for r in report.rows):
        report.notes.append("no ok GPU (cuda) convergence cells: no GPU cost and no break-even.")
    if not any(r.device == "cpu" for r in report.rows):
        report.notes.append("no ok CPU convergence cells: no CPU cost and no break-even.")
    return report


def _finite(value) -> float:
    """``value`` as a float, 0 where it is missing or not finite."""
    return float(value) if value is not None and np.isfinite(value) else 0.0


def _run_seconds(cell) -> float | None:
    timed = cell.get("timed_s")
    if timed is not None and np.isfinite(timed):
        return float(timed) + _finite(cell.get("warmup_s")) + _finite(cell.get("overhead_s"))
    start, end = cell.get("start_unix"), cell.get("end_unix")
    if start is not None and end is not None and np.isfinite(start) and np.isfinite(end):
        return float(end) - float(start)
    return None


def _runs_to_break_even(extra: float, saving: float) -> float:
    if extra <= 0:
        return 0.0
    if saving <= 0:
        return math.inf
    return math.ceil(extra / saving)


def break_even(rows: list[CostRow], model: CostModel) -> list[BreakEven]:
    """Break-even runs per (env, loader) with both a cpu and a cuda row."""
    table = {(r.env, r.loader, r.device): r for r in rows}
    out = []
    for env, loader in sorted({(r.env, r.loader) for r in rows}):
        cpu, gpu = table.get((env, loader, "cpu")), table.get((env, loader, "cuda"))
        if cpu is None or gpu is None:
            continue
        # the machines' prices of the rows' kinds; none to recover when the hardware is
        # rented by the hour (pricing: cloud)
        extra = 0.0 if model.pricing == "cloud" else (
            (gpu.machine_price if gpu.machine_price is not None
             else model.devices["cuda"].hardware_price)
            - (cpu.machine_price if cpu.machine_price is not None
               else model.devices["cpu"].hardware_price))
        save_el = cpu.electricity.value - gpu.electricity.value
        save_all = save_el + cpu.waiting.value - gpu.waiting.value
        out.append(BreakEven(env=env, loader=loader, extra_price=extra,
                             saving_electricity=save_el,
                             runs_electricity=_runs_to_break_even(extra, save_el),
                             saving_with_waiting=save_all,
                             runs_with_waiting=_runs_to_break_even(extra, save_all)))
    return out
