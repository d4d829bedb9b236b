"""The tables the README and the docs show from the shipped records are the commands' current
output, line for line: `headline` in the README; `summary`, `track-record`, `two-ends --stored`,
`two-ends --curve`, `miss-split --stored` and `headline --measured reruns` in
docs/validation.md; the same in reports/validation/README.md where it shows them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from realnets.cli import main

ROOT = Path(__file__).resolve().parents[3]
SUMMARY = ROOT / "reports" / "validation" / "summary.json"


REPORTS = sorted(str(d) for d in (ROOT / "reports" / "validation").iterdir() if d.is_dir())
# command -> its arguments over the shipped records
COMMANDS = {"summary": [str(SUMMARY)], "track-record": [str(SUMMARY)],
            "two-ends": [*REPORTS, "--stored"], "miss-split": [*REPORTS, "--stored"],
            "two-ends --curve": [*REPORTS, "--curve"],
            "headline --measured reruns": [str(SUMMARY), "--measured", "reruns"]}


def _tables(capsys, *argv) -> list[str]:
    assert main(list(argv)) == 0
    out = capsys.readouterr().out
    blocks = [t.strip() for t in re.split(r"\n\s*\n", out) if t.strip().startswith("|")]
    # a table's rows only (a line after it, such as the directories without a record, is not)
    return ["\n".join(x for x in b.splitlines() if x.startswith("|")) for b in blocks]


def test_the_readme_headline_is_the_commands_output(capsys):
    [table] = _tables(capsys, "headline", str(SUMMARY))
    assert table in (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_validation_docs_tables_are_the_commands_output(capsys, command):
    tables = _tables(capsys, *command.split()[:1], *COMMANDS[command])
    assert tables
    doc = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    for table in tables:
        assert table in doc, f"docs/validation.md: rerun python -m realnets {command}: " \
                             f"{table.splitlines()[0][:80]}"
    readme = (ROOT / "reports" / "validation" / "README.md").read_text(encoding="utf-8")
    for table in tables:             # where it shows one, it shows it whole and current
        if table.splitlines()[0] in readme.splitlines():
            assert table in readme, f"reports/validation/README.md: rerun python -m realnets " \
                                    f"{command}: {table.splitlines()[0][:80]}"


def test_the_curve_tables_count_line_is_the_commands_output(capsys):
    """The line under `two-ends --curve`'s table (within 2x at every batch size) is current in
    docs/validation.md too."""
    assert main(["two-ends", *REPORTS, "--curve"]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines()
              if x.startswith("Within 2x of the reruns' median at every batch size")]
    assert line in (ROOT / "docs" / "validation.md").read_text(encoding="utf-8").splitlines()
