"""Prices per kind of device, dated and sourced, and the cloud alternative (issue 42, item 4):
a run is charged its kind's machine price written off, or with ``pricing: cloud`` its kind's
price per hour, and the break-even takes the kinds' machine prices."""

from __future__ import annotations

import pytest

from mnistbench.results import aggregate, cost
from tests.fakes import make_study


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kinds")
    make_study(tmp / "runs", repeats=1, batch_sizes=(128,), precisions=("fp32",),
               experiments=("convergence",), convergence_epochs=2)
    aggregate.aggregate(tmp / "runs", tmp / "results")
    return aggregate.load_tables(tmp / "results")


def test_every_default_kind_is_dated_and_sourced():
    model = cost.load_model(None)
    assert {"H200", "H100", "RTX 4090", "cpu"} <= set(model.kinds)
    for name, kind in model.kinds.items():
        assert kind.hardware_price > 0 and kind.cloud_per_hour > 0, name
        assert len(kind.date) == 7 and kind.source, name
    assert model.pricing == "purchase"
    assert model.kinds["H200"].hardware_price >= 10 * model.devices["cuda"].hardware_price
    keys = [k for k, _, _ in model.as_rows()]
    assert "kinds.H200" in keys and "pricing" in keys


def test_a_row_takes_its_kinds_price_and_the_cloud_price_when_asked(tables):
    """The fake GPU is an RTX 4090: its kind's machine price, written off; with pricing:
    cloud, its cloud price per hour, and nothing to recover at the break-even."""
    summary = tables.summary.assign(gpu_name=tables.summary["gpu_name"].where(
        tables.summary["device"] != "cuda", "NVIDIA H200"))
    bought = cost.validate({})
    rented = cost.validate({"pricing": "cloud"})
    for model, rate in ((bought, bought.kinds["H200"].hardware_price
                         / (bought.devices["cuda"].life_years
                            * bought.devices["cuda"].hours_per_year)),
                        (rented, rented.kinds["H200"].cloud_per_hour)):
        report = cost.compute(summary, tables.epochs, model)
        gpu = next(r for r in report.rows if r.device == "cuda")
        assert gpu.hardware.value == pytest.approx(rate * gpu.run_s.value / 3600)
        assert gpu.hardware_note.startswith("H200: ")
        assert gpu.epochs == 2
    report = cost.compute(summary, tables.epochs, bought)
    assert report.break_even[0].extra_price == pytest.approx(
        bought.kinds["H200"].hardware_price - bought.kinds["cpu"].hardware_price)
    report = cost.compute(summary, tables.epochs, rented)
    assert report.break_even[0].extra_price == 0


def test_a_kind_needs_its_date_and_source():
    with pytest.raises(cost.CostError, match="kinds"):
        cost.validate({"kinds": {"A100": {"hardware_price": 20000, "cloud_per_hour": 2.0,
                                          "date": "May 2026", "source": "x"}}})
    with pytest.raises(cost.CostError, match="kinds"):
        cost.validate({"kinds": {"A100": {"hardware_price": 20000, "cloud_per_hour": 2.0}}})
    with pytest.raises(cost.CostError, match="pricing"):
        cost.validate({"pricing": "lease"})
