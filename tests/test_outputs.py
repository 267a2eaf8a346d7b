"""Every output of one run is written from the one model of it (results/model.py), and each says the numbers the
ledger holds: the session's terminal table, the step summary, JUnit's properties, `report`'s Markdown and JSON,
the site's index and the CSV export, read for one real offline run on three hosts (tests/sites.py)."""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from sites import OfflineRuns
from sweeps import Sweeps
from test_site import built_site, text_of

from pytest_palette.commands import main
from pytest_palette.results import step_summary
from pytest_palette.results.ledger import load

pytestmark = pytest.mark.end_to_end


def test_every_output_of_one_run_says_the_ledgers_numbers(offline_runs: OfflineRuns, sweeps: Sweeps,
                                                          tmp_path: Path) -> None:
    records = list(load(offline_runs.good).latest.values())
    hosts = sorted({r.host for r in records})
    counts = {host: Counter(r.outcome for r in records if r.host == host) for host in hosts}
    tokens = {host: (sum(r.usage.input_tokens or 0 for r in records if r.host == host),
                     sum(r.usage.output_tokens or 0 for r in records if r.host == host)) for host in hosts}
    assert len(hosts) == 3 and all(sum(c.values()) == len(offline_runs.cases) for c in counts.values())
    said = {host: f"{host}: {c['pass']} passed, {c['fail']} failed, {c['error']} errored"
            + (f", {c['skipped']} skipped" if c["skipped"] else "") for host, c in counts.items()}
    spent = {host: f"{i:,} in / {o:,} out tokens" for host, (i, o) in tokens.items() if i or o}
    assert spent  # the rehearsal model's clients report tokens: there is something to compare

    # The session's own terminal table, as it printed it.
    table = offline_runs.good_output[offline_runs.good_output.index("palette summary"):]
    for host in hosts:
        line = next(line for line in table.splitlines() if line.startswith(said[host]))
        assert host not in spent or spent[host] in line, line
    # The step summary.
    summary = step_summary.markdown(records, hosts)
    assert all(f"- {said[host]}" in summary for host in hosts) and all(s in summary for s in spent.values())
    # JUnit: each item's verdict property.
    assert offline_runs.good_junit is not None
    verdicts = Counter()
    for case in ET.parse(offline_runs.good_junit).getroot().iter("testcase"):
        found = {p.get("name"): p.get("value") for p in case.iter("property")}
        verdicts[(found["host"], found["verdict"])] += 1
    assert verdicts == Counter({(host, outcome): n for host, c in counts.items() for outcome, n in c.items()})
    # `report`'s Markdown and JSON.
    markdown, data = tmp_path / "report.md", tmp_path / "report.json"
    assert main(["report", str(offline_runs.good), "--out", str(markdown), "--json", str(data)]) == 0
    report = json.loads(data.read_text(encoding="utf-8"))
    for host in hosts:
        [column] = [c for c in report["hosts"] if c["host"] == host]
        c = counts[host]
        assert (column["passes"], column["fails"], column["errors"], column["skipped"]) == \
            (c["pass"], c["fail"], c["error"], c["skipped"])
        assert (column["usage"]["input_tokens"] or 0, column["usage"]["output_tokens"] or 0) == tokens[host]
        passed = f"{c['pass']}/{c['pass'] + c['fail']}"
        assert re.search(rf"^\| {host} \| {passed} \|", markdown.read_text(encoding="utf-8"), re.M), host
    # The site's index: the run's scores table, row by row.
    index = text_of((built_site(sweeps, offline_runs) / "index.html").read_text(encoding="utf-8"))
    good = index[index.index("Run good"):index.index("Run bad")] if "Run bad" in index else index
    for host in hosts:
        c = counts[host]
        assert f"{host} {c['pass']}/{c['pass'] + c['fail']} " in good, host
    # The CSV export.
    rows_file = tmp_path / "runs.csv"
    assert main(["export", "csv", str(offline_runs.good), "--out", str(rows_file)]) == 0
    with rows_file.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert Counter((row["host"], row["outcome"]) for row in rows) == verdicts
    assert {host: (sum(int(r["input_tokens"] or 0) for r in rows if r["host"] == host),
                   sum(int(r["output_tokens"] or 0) for r in rows if r["host"] == host)) for host in hosts} == tokens
