"""The caveats right under the verdict (mnistbench.report.sections.caveats): stale cells and
why, versions off the pins, dirty trees, several hosts or sessions in one environment."""

from __future__ import annotations

import json

from mnistbench.report.sections import caveats
from mnistbench.results import aggregate
from tests.report.test_report_studies import results_of, section_of, visible, write


def test_a_clean_study_says_it_has_no_caveats(tmp_path):
    """Cells of one host and one revision, with the pinned torch and no manifest: none."""
    results = results_of(tmp_path, repeats=2, batch_sizes=(128,), precisions=("fp32",),
                         convergence_epochs=2)
    text = visible(section_of(write(aggregate.load_tables(results), tmp_path, results=results),
                              "caveats"))
    assert "None found" in text


def test_every_caveat_of_a_publication_is_on_the_page(tmp_path):
    """A publication's stale cells (from its manifest, with the reason), a torch off the pin,
    a dirty tree and two sessions of one environment, with how far a cell's repeats differ."""
    results = results_of(tmp_path, repeats=2, batch_sizes=(128,), precisions=("fp32",),
                         convergence_epochs=2)
    tables = aggregate.load_tables(results)
    summary = tables.summary.copy()
    second = summary["repeat"] == 1
    summary["torch"] = "2.11.0+cu130"
    summary["git_revision"] = "6e4b8e2b78aa4b6ebfeb42d538b187deed3755bd-dirty"
    summary.loc[second, "git_revision"] = "a02afbd460d6e2e338b12a9e71c922c91659cf28"
    summary["code_digest"] = "45a5684d88ce138a"
    summary.loc[second, "code_digest"] = "9595bd283f46e678"
    tables = aggregate.Tables(summary, tables.epochs, tables.resources)
    stale = [{"cell": f"alpha/convergence/{c}", "why": "measured by other code"}
             for c in summary["cell"].head(3)]
    checks = {"stale": stale, "reason": "the lent machine runs its own torch"}
    # a publication's data/ rendered again: the checks are read from the manifest beside it
    (results / caveats.MANIFEST).write_text(json.dumps({"checks": checks}))
    assert caveats.read_checks(results) == checks
    text = visible(section_of(write(tables, tmp_path, results=results, checks=checks),
                              "caveats"))
    assert ("Published stale (measured by other code than the publishing checkout's): 3 cells "
            "of alpha. Why they were published: the lent machine runs its own torch") in text
    pin = caveats.pinned().get("torch")
    assert pin, "envs/pip/torch.txt pins torch"
    assert f"Versions that differ from the pins (torch {pin}): alpha ran torch 2.11.0+cu130" \
        in text
    n = len(summary)
    assert (f"Measured from trees with uncommitted changes (a revision ending -dirty: the code "
            f"that ran is not exactly any commit): alpha, {n - int(second.sum())} of {n} cells "
            "(6e4b8e2-dirty)") in text
    assert "alpha's cells come from several hosts or sessions of one environment: 2 code " \
           "digests (45a5684d88ce138a, 9595bd283f46e678)" in text
    assert "Its repeats at the blog's settings: " in text and "% apart (median" in text


def test_the_caveats_come_right_after_the_verdict(tmp_path):
    """The section follows the verdict's, before the findings."""
    results = results_of(tmp_path, repeats=1, batch_sizes=(128,), precisions=("fp32",),
                         convergence_epochs=1)
    html = write(aggregate.load_tables(results), tmp_path)
    assert html.index('<section id="verdict">') < html.index('<section id="caveats">') \
        < html.index('<section id="findings">')


def test_a_manifest_nested_deep_beside_the_tables_is_read_as_none(tmp_path):
    """Weak case of the sweep of issue 41 (deep nesting): `report --results R` read
    R/manifest.json (a publication's checks) with json.loads; one nested 5000 deep was a
    RecursionError traceback. It now reads as no manifest, as broken JSON did."""
    (tmp_path / "manifest.json").write_text("[" * 5000 + "]" * 5000)
    assert caveats.read_checks(tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"checks": {"failed": []}}))
    assert caveats.read_checks(tmp_path) == {"failed": []}
