"""``report/README.md`` of a publication (:func:`readme`), rendered from its manifest: what was
measured where, how to reproduce it, how to add a machine. Every value in it that comes from
the results or the command line is inert Markdown (:func:`inert`, :func:`inert_cell`,
:func:`fence_for`): shown as text, never as markup."""

from __future__ import annotations

import re

from mnistbench.core import untrusted

#: The template of report/README.md (rendered from the manifest).
README_TEMPLATE = "publication-README.md.j2"


#: ``value`` as text that Markdown shows as it is, on one line, in a code span no backtick of
#: it closes (HTML or Markdown in it stays text); one home: mnistbench.core.untrusted.
inert = untrusted.markdown_code
#: :data:`inert` for a cell of a Markdown table (a pipe in it escaped).
inert_cell = untrusted.markdown_cell


def fence_for(text: object) -> str:
    """The backtick fence of a code block that holds ``text``: longer than any backtick run
    in it, at least three."""
    runs = re.findall(r"`+", str(text))
    return "`" * max(3, max((len(run) for run in runs), default=0) + 1)


def readme(manifest: dict) -> str:
    """``report/README.md`` of a publication, from its manifest. Every value that comes from
    the results or the command line (environment names, hardware, dates, revision, config
    files, the waiver's reason, the commands) is inert: in a code span (:func:`inert`), with
    pipes escaped in tables (:func:`inert_cell`), or in a code block no backtick run of it can
    close (:func:`fence_for`)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    def hw(env: dict) -> str:
        value = env["hardware"].get("hardware") or env["hardware"].get("cpu_model") or "?"
        return ", ".join(value) if isinstance(value, list) else value

    def statuses(counts: dict) -> str:
        return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"

    environment = Environment(loader=PackageLoader("mnistbench.report", "templates"),
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)
    environment.filters.update(code=inert, cell=inert_cell)
    template = environment.get_template(README_TEMPLATE)
    gpu = any(d != "cpu" for e in manifest["environments"] for d in e["measured_devices"])
    block = "\n".join(str(v) for v in (manifest["command"], manifest["render"]["results"],
                                        manifest["render"]["cost_model"],
                                        manifest["git_revision"]))
    return template.render(m=manifest, hw=hw, statuses=statuses, gpu=gpu,
                           fence=fence_for(block), one_line=untrusted.one_line)
