"""The workflow's config is bounded before anything walks it (issue 41): a YAML "billion
laughs" given with --configfile stops `snakemake -n` at once with one paragraph naming what it
expands to and the fix (it ran at full CPU until killed); the bound itself is
mnistbench.core.untrusted.check_tree (tests/core/test_untrusted.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = REPO / ".venv" / "bin" / "snakemake"

BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]"
       for a, b in zip("abcdefgh", "bcdefghi", strict=True)]) + "\n"


def test_a_billion_laughs_config_stops_a_dry_run_at_once(tmp_path):
    """`snakemake -n --configfile laughs.yaml` exits non-zero within Snakemake's own start-up
    (a generous 120 s on a loaded 2-core machine; it ran until killed), naming the billion
    laughs and the fix, without a traceback or a results folder."""
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(BILLION_LAUGHS)
    started = time.monotonic()
    proc = subprocess.run([str(SNAKEMAKE), "-n", "--snakefile", str(REPO / "Snakefile"),
                           "--directory", str(tmp_path), "--configfile", str(bomb)],
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300, check=False)
    assert proc.returncode != 0 and time.monotonic() - started < 120
    assert "the config expands to more than 200000 values" in proc.stdout, proc.stdout
    assert "billion laughs" in proc.stdout and "--configfile" in proc.stdout
    assert "Traceback" not in proc.stdout
    assert not (tmp_path / "results").exists()
