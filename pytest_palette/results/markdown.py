"""The run's model (results/model.py) as Markdown: `palette-bench report`'s page, and the tables the site shows."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..cases import DEFAULT_MAX_POLLS
from . import lift, tasks
from .marks import apart, cell_detail, mean_text, number, table_lines
from .model import Column, Metrics, Report
from .prices import money
from .tally import Cell


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _interval(bounds: tuple[float, float] | None) -> str:
    return "—" if bounds is None else f"{bounds[0]:.1%} – {bounds[1]:.1%}"


def _of(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "—"


Table = tuple[list[str], list[list[str]]]


def tables(report: Report) -> dict[str, Table]:
    """The report's tables as text, (header, rows) each: what the Markdown and the HTML site both show."""
    columns = report.columns
    scores = (["Host", "Passed", "Errors / skipped", "95% interval (Wilson)", "Mean score (95% interval)", "Model",
               "Provider", "Commands", "Scaffold notes", "Runs"],
              [[c.label, _of(c.passes, c.n), apart(c.errors, c.skipped), _interval(c.wilson()), score_text(c),
                ", ".join(c.models), ", ".join(c.providers), " and ".join(c.sandboxes),
                "; ".join(s for s in c.scaffold if s) or "—", ", ".join(c.runs)] for c in columns])
    paired = (["A", "B", "A higher", "B higher", "ties", "p", "verdict"],
              [[p.a, p.b, str(p.test.b), str(p.test.c), str(p.test.ties), f"{p.test.p:.4g}", p.test.verdict]
               for p in report.pairs])
    paired_scores = (["A", "B", "A scores higher", "B scores higher", "ties", "W+", "p", "verdict"],
                     [[p.a, p.b, str(p.scores.better), str(p.scores.worse), str(p.scores.ties), f"{p.scores.w_plus:g}",
                       f"{p.scores.p:.4g}" + ("" if p.scores.exact else " (normal approx.)"), p.scores.verdict]
                      for p in report.pairs])
    header = (["Host"] + [f"pass@{k}" for k in report.ks] + [f"pass^{k}" for k in report.ks if k > 1]
              + [f"score@{k}" for k in report.ks])
    rows = []
    for c in columns:
        cases_n = sum(1 for case in report.cases if (cell := report.cell(case, c.label)) and cell.n)
        rows.append([c.label] + [_k_text(c.pass_at[k], cases_n) for k in report.ks]
                    + [_k_text(c.pass_hat[k], cases_n) for k in report.ks if k > 1]
                    + [_k_text(c.score_at[k], cases_n, score=True) for k in report.ks])
    metrics = (["Metric", *(c.label for c in columns)], _metric_rows(columns))
    return {"scores": scores, "paired": paired, "paired_scores": paired_scores, "pass_k": (header, rows),
            "metrics": metrics}


def score_text(column: Column) -> str:
    """A host's mean score with its 95% interval (over its cases), and the runs it could not score."""
    score = column.score
    if score is None:
        return "—"
    text = mean_text(score)
    if score.n < column.metrics.cases_judged:
        text += f" over {score.n} of {column.metrics.cases_judged} cases"
    return text + (f"; {column.unscored} run(s) unscored (written before checks)" if column.unscored else "")


def to_markdown(report: Report) -> str:
    """The report as Markdown: scores, pass@k, case by case, disagreements, metrics, and the limits."""
    columns, labels = report.columns, [c.label for c in report.columns]
    shown = tables(report)
    lines = ["# Palette skill benchmark — results", "",
             f"{report.records - report.duplicates_dropped} record(s) from {len(report.ledgers)} ledger file(s); "
             "every host is judged by the same rules, from what is on disk.", ""]
    if report.lifts:
        skills = [s for c in columns if not c.baseline for s in c.skill_hashes]
        lines += ["## Is the skill better than no skill?", "", lift.intro(skills), "",
                  *table_lines(*lift.table(report.lifts)), ""]
    lines += ["## Scores", ""]
    lines += table_lines(*shown["scores"])
    unconfined = [c.label for c in columns if "unconfined" in c.sandboxes]
    if unconfined:
        lines += ["", f"{unconfined_words(unconfined)}."]
    lines += _cost_lines(columns)
    graded = [(c.label, texts) for c in columns if (texts := _grader_texts(c))]
    if graded:
        lines += ["", "The model-graded checks (rubric, validity) took, apart from the agents: "
                  + "; ".join(f"{label}: {', '.join(texts)}" for label, texts in graded) + "."]
    usage = [(c.label, texts) for c in columns if (texts := _usage_texts(c))]
    if usage:
        lines += ["", "Reported usage: " + "; ".join(f"{label}: {', '.join(texts)}" for label, texts in usage) + "."]
    lines += ["", "Score: each run's score in [0, 1] from its checks (0 when a gate failed; docs/judge.md), averaged "
                  "per case, then over the cases; the interval is a 95% t interval over the cases."]
    if report.pairs:
        lines += ["", "Paired exact test over the cases both hosts judged (sign test on per-case pass rates):", ""]
        lines += table_lines(*shown["paired"])
        lines += ["", "Paired test on scores over the cases both hosts scored (Wilcoxon signed-rank on per-case mean "
                      "scores, exact for small n):", ""]
        lines += table_lines(*shown["paired_scores"])
    lines += ["", "## pass@k, pass^k and score@k", "",
              "pass@k: the chance that at least one of k runs passes (unbiased estimator); pass^k: the chance that "
              "all k pass; score@k: the expected best score of k runs. Averaged over the cases with at least k "
              "judged runs.", ""]
    lines += table_lines(*shown["pass_k"])
    lines += ["", "## Case by case", ""]
    lines += table_lines(["Case", *labels], ([case] + [cell_detail(report.cell(case, label)) for label in labels]
                                              for case in report.cases))
    lines += ["", f"Cells: passes/n judged runs (pass or FAIL for one run), the mean score where below 1 (± its "
                  f"spread over runs), median slides, worst polls; the judge "
                  f"fails a case with more polls that did not wait for the work than its budget "
                  f"({DEFAULT_MAX_POLLS} unless the case sets its own)."]
    lines += _failure_lines(report)
    lines += _instead_lines(report)
    lines += tasks.markdown(report.tasks, report.ks)
    lines += ["", "## Metrics", ""]
    lines += table_lines(*shown["metrics"])
    lines += ["", "## What these numbers are not entitled to say", ""]
    lines += [f"{i}. {note}" for i, note in enumerate(report.caveats, 1)]
    return "\n".join(lines) + "\n"


#: Usage fields the tokens-and-cost table shows; every other summed field is listed in words after it.
COSTED = ("input_tokens", "output_tokens", "cost_usd")
#: Where a column's cost came from, in words.
COST_FROM = {"provider": "reported by the client", "prices": "your --palette-prices table",
             "": "recorded (its source not said)"}


def unconfined_words(hosts: list[str]) -> str:
    """What it means that the agent's commands on `hosts` ran unconfined, in one sentence (the report, `show`)."""
    return (f"Unconfined: the agent's commands on {', '.join(hosts)} ran without the sandbox (--palette-sandbox "
            "none, a person's own agent, or a run recorded before it existed): they could read the scripted "
            "replies and the caller's files, and reach the network")


def _cost_lines(columns: list[Column]) -> list[str]:
    """Tokens and cost per host, where each cost came from, and which model had no price."""
    if not any(c.usage_runs.get(name) for c in columns for name in COSTED):
        return []
    lines = ["", "Tokens and cost, as each host's client reported its tokens; a cost from the client where it "
                 "reports one, else from your price table, else none:", ""]
    rows = []
    for c in columns:
        tokens_in, tokens_out, cost = (c.usage.get(name) for name in COSTED)
        counted = c.usage_runs.get("input_tokens", 0) or c.usage_runs.get("output_tokens", 0)
        per_run = ((tokens_in or 0) + (tokens_out or 0)) / counted if counted else None
        priced = c.usage_runs.get("cost_usd", 0)
        sources = [f"{COST_FROM.get(source, source)}" + (f" ({n} runs)" if len(c.cost_from) > 1 else "")
                   for source, n in c.cost_from.items()]
        if c.unpriced:
            sources.append(f"no price for {', '.join(c.unpriced_models)}: pass --palette-prices"
                           + (f" ({c.unpriced} runs)" if priced else ""))
        rows.append([c.label, _count(tokens_in), _count(tokens_out), _count(per_run), _usd(cost),
                     _usd(cost / priced if cost is not None and priced else None), "; ".join(sources) or "—"])
    lines += table_lines(["Host", "Input tokens", "Output tokens", "Tokens per run (in + out)", "Cost", "Cost per run",
                           "Cost from"], rows)
    rehearsed = [c.label for c in columns if c.cost_from.get("prices")
                 and any(p == "rehearsal" for p in c.providers)]
    if rehearsed:
        lines += ["", f"The cost of {', '.join(rehearsed)} is your price table applied to the rehearsal model's "
                      "estimated tokens: a scripted stand-in ran, nothing was charged."]
    return lines


def _count(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _usd(value: float | None) -> str:
    return "—" if value is None else money(value)


#: The graders' usage, reported on a line of its own: never summed into the agent's.
GRADED = ("grader_input_tokens", "grader_output_tokens", "grader_cost_usd")


def _grader_texts(column: Column) -> list[str]:
    tokens_in, tokens_out, cost = (column.usage.get(name) for name in GRADED)
    texts = []
    if tokens_in is not None or tokens_out is not None:
        texts.append(f"{tokens_in or 0:,.0f} in / {tokens_out or 0:,.0f} out tokens")
    if cost is not None:
        texts.append(money(cost))
    return texts


def _usage_texts(column: Column) -> list[str]:
    """A column's other reported totals (turns, and any count added to the record) as "<total> <field name>"."""
    texts = []
    for name, total in column.usage.items():
        if total is None or name in COSTED or name in GRADED:
            continue
        texts.append(f"{total:,}" if isinstance(total, int) else f"{total:,.2f}")
        texts[-1] += f" {name.replace('_', ' ')}"
    return texts


def _k_text(value: tuple[float | None, int], cases_n: int, score: bool = False) -> str:
    mean, over = value
    if mean is None:
        return "— (k > n)"
    return (f"{mean:.2f}" if score else _pct(mean)) + ("" if over == cases_n else f" ({over} cases)")


def _instead_lines(report: Report) -> list[str]:
    """For the columns that ran with no skill: what the agent did about a deck, in all and case by case."""
    baseline = [c for c in report.columns if c.baseline]
    counted = lift.instead_table((c.label, c.instead) for c in baseline)
    if counted is None:
        return []

    def did(cell: Cell | None) -> str:
        done = lift.instead([cell]) if cell is not None else Counter()
        if len(done) == 1 and sum(done.values()) == 1:
            return next(iter(done))
        return "; ".join(f"{what} ×{n}" for what, n in done.most_common()) or "—"

    return ["", "## What the agent did instead (no skill)", "", lift.INSTEAD, "", *table_lines(*counted), "",
            *table_lines(["Case", *(c.label for c in baseline)],
                         ([case, *(did(report.cell(case, c.label)) for c in baseline)] for case in report.cases))]


def _failure_lines(report: Report) -> list[str]:
    if len(report.columns) == 1:
        label = report.columns[0].label
        lines = ["", "## Failures", ""]
        failing = [case for case in report.cases if (c := report.cell(case, label)) and (c.fails or c.errors)]
        if not failing:
            return [*lines, "None. Every judged run passed."]
        for case in failing:
            failed = report.cells[(case, label)]
            lines.append(f"- **{case}** ({_of(failed.passes, failed.n)}): " + _failure_text(failed))
            if failed.chains:
                chain, _ = failed.chains.most_common(1)[0]
                lines.append(f"  - calls: {' → '.join(chain) or 'none'}")
        return lines
    lines = ["", "## Where the hosts disagree", ""]
    if not report.disagreements:
        return [*lines, "Nowhere: the hosts agreed on every case they both judged."]
    for case in report.disagreements:
        lines.append(f"- **{case}**")
        for column in report.columns:
            cell = report.cell(case, column.label)
            if cell is None:
                lines.append(f"  - {column.label}: did not run")
            elif not (cell.fails or cell.errors):
                lines.append(f"  - {column.label} ({_of(cell.passes, cell.n)}): passed every judged run")
            else:
                lines.append(f"  - {column.label} ({_of(cell.passes, cell.n)}): {_failure_text(cell)}")
    return lines


def _failure_text(cell: Cell) -> str:
    def counted(counter: Counter[str], prefix: str = "") -> list[str]:
        return [f"{prefix}{text}" + (f" (×{count})" if count > 1 else "") for text, count in counter.most_common()]

    return "; ".join(counted(cell.failures) + counted(cell.host_errors, "error: "))


def _metric_rows(columns: list[Column]) -> list[list[str]]:
    m = [c.metrics for c in columns]

    def row(name: str, render: Callable[[Metrics], str]) -> list[str]:
        return [name, *(render(x) for x in m)]

    return [
        row("Cases passed (every judged run)", lambda x: _of(x.cases_passed, x.cases_judged)),
        row("Runs passed", lambda x: _of(x.runs_passed, x.runs_judged)),
        row("Decks built", lambda x: _of(x.decks_built, x.runs_judged)),
        row("Decks carrying IBM Plex", lambda x: _of(x.decks_with_plex, x.decks_built)),
        row("Median case duration", lambda x: number(x.median_case_seconds, " s")),
        row("Total wall clock (first start → last end)", lambda x: _minutes(x.wall_clock_seconds)),
        row("Median Palette calls per case", lambda x: number(x.median_calls)),
        row("Status polls (total)", lambda x: str(x.polls_total)),
        row("Worst case polls that did not wait", lambda x: f"{x.polls_worst} / {x.polls_worst_ceiling}"),
        row("Runs at their case's poll ceiling", lambda x: str(x.at_poll_ceiling)),
        row("Runs over their case's poll ceiling", lambda x: str(x.over_poll_ceiling)),
        row("Pasted material reached `--context` (or `--source`)",
            lambda x: _of(x.context_reached, x.context_expected)),
        row("Edits routed to `edit`", lambda x: _of(x.edit_called, x.edit_expected)),
        row("Revisions discarded by re-planning", lambda x: str(x.replanned_after_edit)),
        row("Trigger recall: the skill used where the request needed it",
            lambda x: x.triggers.recall_text()),
        row("Trigger precision: the skill needed where it was used",
            lambda x: x.triggers.precision_text()),
    ]


def _minutes(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds / 60:.1f} min"


