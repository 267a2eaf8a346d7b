"""Two measurements before vs after, per case and host, with the paired test.

The usual question is "did my skill change help?", so the loudest line is the one that says when the
skill did *not* change: then any difference is noise, or a change outside the skill. When one side ran no
skill at all (`--palette-skill none`), the question is "is the skill better than no skill?", and the
comparison is titled and read as the skill's lift over that baseline, whichever side it was given on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from . import lift, stats, tasks
from .ledger import Reading
from .marks import table_lines
from .model import Column, Report, build_report
from .prices import money
from .record import Record
from .tally import Cell, Tally, tally

SAME_SKILL = ("same skill hash: any difference is noise or a change outside the skill (model, budgets, host "
              "code, plugin version, or luck)")


@dataclass(frozen=True)
class Change:
    case: str
    host: str
    before: tuple[int, int] | None  # (passes, judged runs); None when the case did not run on that side
    after: tuple[int, int] | None
    #: The case's mean score on each side; None where it did not run or no score is known.
    score_before: float | None = None
    score_after: float | None = None

    @property
    def flag(self) -> str:
        if self.before is None:
            return "new"
        if self.after is None:
            return "gone"
        (pb, nb), (pa, na) = self.before, self.after
        if not nb or not na:
            return "no verdict"
        difference = pa * nb - pb * na  # exact: 2/3 vs 4/6 is no change
        return "regression" if difference < 0 else "improvement" if difference > 0 else ""


@dataclass(frozen=True)
class Spent:
    """What one host's runs on one side took, as recorded."""

    input_tokens: float | None
    output_tokens: float | None
    cost_usd: float | None
    counted: int  # runs that reported tokens
    priced: int  # runs that had a cost
    unpriced: list[str]  # models whose tokens had no price

    @classmethod
    def of(cls, column: Column) -> Spent:
        runs = column.usage_runs
        return cls(column.usage.get("input_tokens"), column.usage.get("output_tokens"), column.usage.get("cost_usd"),
                   max(runs.get("input_tokens", 0), runs.get("output_tokens", 0)), runs.get("cost_usd", 0),
                   column.unpriced_models)

    def tokens_text(self) -> str:
        if not self.counted:
            return "—"
        total = (self.input_tokens or 0) + (self.output_tokens or 0)
        return f"{total / self.counted:,.0f}"

    def cost_text(self) -> str:
        if self.cost_usd is None or not self.priced:
            return f"no price for {', '.join(self.unpriced)}" if self.unpriced else "—"
        return f"{money(self.cost_usd)} ({money(self.cost_usd / self.priced)} a run)"


@dataclass
class HostComparison:
    host: str
    test: stats.PairedTest
    shared: int
    before_model: list[str]
    after_model: list[str]
    config_changes: list[str]
    #: Tokens and cost on each side: (input tokens, output tokens, cost in USD, runs that reported tokens,
    #: runs that had a cost), None where no run reported it.
    spent_before: Spent | None = None
    spent_after: Spent | None = None
    #: The signed-rank test on the shared cases' mean scores (after − before), and each side's mean score.
    scores: stats.SignedRankTest = field(default_factory=lambda: stats.signed_rank_test(()))
    score_before: stats.MeanScore | None = None
    score_after: stats.MeanScore | None = None


@dataclass
class Comparison:
    changes: list[Change]
    hosts: list[HostComparison]
    skill_before: list[str]
    skill_after: list[str]
    warnings: list[str] = field(default_factory=list)
    #: Which side ran no skill, "before" or "after", when exactly one did: the comparison is then the lift.
    baseline: str | None = None
    #: Per host compared, with the skill against without it (when `baseline` is set).
    lifts: list[lift.HostLift] = field(default_factory=list)
    #: The two sides ran the same cases on different hosts (one CI job per host): host against host, as one run
    #: with both hosts would be compared, each row named "before-host vs after-host".
    across_hosts: bool = False
    #: Each compared row's host on either side: (h, h) for a host both ran, (first's, second's) across hosts.
    sides: dict[str, tuple[str, str]] = field(default_factory=dict)

    def host_on(self, change: Change, side: int) -> str:
        """The host a change's case ran on, on side 0 (before) or 1 (after)."""
        return self.sides.get(change.host, (change.host, change.host))[side]

    @property
    def skill_changed(self) -> bool:
        return set(self.skill_before) != set(self.skill_after)

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.flag == "regression"]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.flag == "improvement"]


def _by_host(report: Report) -> dict[str, Column]:
    return {column.host: column for column in report.columns}


def _rate(cell: Cell | None) -> tuple[int, int] | None:
    return None if cell is None else cell.rate()


def _score(cell: Cell | None) -> float | None:
    return None if cell is None or cell.score is None else cell.score.mean


def _config_changes(before: Column, after: Column) -> list[str]:
    """What visibly changed in a host's configuration; the fingerprint also covers budgets we cannot see."""
    changes = []
    for name, old, new in (("model", before.models, after.models), ("provider", before.providers, after.providers),
                           ("scaffold", before.scaffold, after.scaffold),
                           ("the agent's commands", before.sandboxes, after.sandboxes)):
        if old != new:
            changes.append(f"{name}: {', '.join(old) or '—'} → {', '.join(new) or '—'}")
    if before.fingerprints != after.fingerprints and not changes:
        changes.append("fingerprint changed, but no recorded model, provider, scaffold or sandbox field did: a budget "
                       "(turn or command timeout, recursion limit), the backend, the skill or the plugin version")
    return changes


Records = Tally | Reading | Iterable[Record]


def compare(records_a: Records, records_b: Records) -> Comparison:
    """Run A (before) against run B (after). Each side must be one measurement (see build_report)."""
    counted_a, counted_b = (r if isinstance(r, Tally) else tally(r) for r in (records_a, records_b))
    before, after = build_report(counted_a), build_report(counted_b)
    old_hosts, new_hosts = _by_host(before), _by_host(after)
    across = not old_hosts.keys() & new_hosts.keys() and len(old_hosts) == 1 and len(new_hosts) == 1
    sides = {host: (host, host) for host in old_hosts.keys() | new_hosts.keys()}
    if across:  # one host a side, not the same one: the same cases on two hosts, as one run with both would be
        [(old_name, old_column)], [(new_name, new_column)] = old_hosts.items(), new_hosts.items()
        name = f"{old_name} vs {new_name}"
        old_hosts, new_hosts, sides = {name: old_column}, {name: new_column}, {name: (old_name, new_name)}
    changes = []
    for host in sorted(old_hosts.keys() | new_hosts.keys()):
        old, new = old_hosts.get(host), new_hosts.get(host)
        cases = sorted({c for c in before.cases if old and (c, old.label) in before.cells}
                       | {c for c in after.cases if new and (c, new.label) in after.cells})
        for case in cases:
            was = before.cell(case, old.label) if old else None
            now = after.cell(case, new.label) if new else None
            changes.append(Change(case, host, _rate(was), _rate(now), _score(was), _score(now)))
    hosts = []
    for host in sorted(old_hosts.keys() & new_hosts.keys()):
        own = [c for c in changes if c.host == host]
        pairs = [(c.before, c.after) for c in own if c.before and c.after]
        test = stats.paired_test([b for b, _ in pairs], [a for _, a in pairs])
        scored = stats.signed_rank_test(c.score_after - c.score_before for c in own
                                        if c.score_before is not None and c.score_after is not None)
        old, new = old_hosts[host], new_hosts[host]
        hosts.append(HostComparison(host, test, len(pairs), old.models, new.models, _config_changes(old, new),
                                    Spent.of(old), Spent.of(new), scored, old.score, new.score))
    skill_before = sorted({s for c in before.columns for s in c.skill_hashes})
    skill_after = sorted({s for c in after.columns for s in c.skill_hashes})
    comparison = Comparison(changes, hosts, skill_before, skill_after, across_hosts=across, sides=sides)
    none_before, none_after = lift.is_baseline(skill_before), lift.is_baseline(skill_after)
    if none_before != none_after:
        comparison.baseline = "before" if none_before else "after"
        for compared in hosts:
            pairs = [(c.before, c.after) for c in changes if c.host == compared.host and c.before and c.after]
            comparison.lifts.append(lift.host_lift(compared.host, [(b, a) if none_after else (a, b)
                                                                   for b, a in pairs]))
    # One skill-set hash over two .claude/ trees: the skills did change, whatever the hash says.
    stale = tasks.stale_lockfiles([*counted_a.family_records, *counted_b.family_records])
    comparison.warnings += [f"a stale lockfile: {said}" for said in stale]
    if not comparison.skill_changed and not across and not stale:
        comparison.warnings.append(SAME_SKILL)
    only = sorted(old_hosts.keys() ^ new_hosts.keys())
    if only:
        comparison.warnings.append(f"host(s) on one side only, not compared: {', '.join(only)}")
    if max((c.n for r in (before, after) for c in r.cells.values()), default=0) <= 1:
        comparison.warnings.append("one run per cell on a side: a single flip is a reason to look, not a verdict")
    return comparison


def _rate_text(rate: tuple[int, int] | None, score: float | None = None) -> str:
    if rate is None:
        return "—"
    return f"{rate[0]}/{rate[1]}" + (f" · {score:.2f}" if score is not None and score < 1 else "")


def _mean_text(score: stats.MeanScore | None) -> str:
    return "—" if score is None else f"{score.mean:.2f}"


def to_markdown(comparison: Comparison) -> str:
    if comparison.baseline is not None:
        return _lift_markdown(comparison)
    across = comparison.across_hosts
    lines = ["# Palette benchmark — host against host" if across else "# Palette benchmark — before vs after", ""]
    if across:
        lines.append("The two runs ran on different hosts: each case is compared host against host (the first run's "
                     "host against the second's), as one run with both hosts would be.")
        if comparison.skill_changed:
            lines.append(f"Skill hash: {', '.join(comparison.skill_before)} → {', '.join(comparison.skill_after)}: "
                         "the hosts ran different skills, so a difference is host *and* skill.")
    elif comparison.skill_changed:
        lines.append(f"Skill hash: {', '.join(comparison.skill_before)} → {', '.join(comparison.skill_after)}.")
    elif SAME_SKILL in comparison.warnings:  # not when a stale lockfile says the skills changed under one hash
        lines.append(f"> ⚠ **{SAME_SKILL}** (both sides ran skill {', '.join(comparison.skill_before)}).")
    for warning in comparison.warnings:
        if warning != SAME_SKILL:
            lines.append(f"> ⚠ {warning}")
    first, second = ("first", "second") if across else ("before", "after")
    worse, better = ("Worse on the second", "Better on the second") if across else ("Worse after", "Better after")
    lines += ["", "## Per host", "", "Outcomes: the sign test on per-case pass rates.", ""]
    lines += [f"| Host | Shared cases | {worse} | {better} | Ties | p (exact) | Verdict | What changed |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for host in comparison.hosts:
        test = host.test
        lines.append(f"| {host.host} | {host.shared} | {test.b} | {test.c} | {test.ties} | {test.p:.4g} | "
                     f"{test.verdict} | {'; '.join(host.config_changes) or '—'} |")
    lines += ["", "Scores: the Wilcoxon signed-rank test on per-case mean scores (exact for small n), over the cases "
                  "both sides scored.", "",
              f"| Host | Mean score {first} | Mean score {second} | Higher {second} | Lower {second} | Ties | W+ | p | "
              "Verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for host in comparison.hosts:
        scores = host.scores
        p = f"{scores.p:.4g}" + ("" if scores.exact else " (normal approx.)")
        lines.append(f"| {host.host} | {_mean_text(host.score_before)} | {_mean_text(host.score_after)} | "
                     f"{scores.better} | {scores.worse} | {scores.ties} | {scores.w_plus:g} | {p} | "
                     f"{scores.verdict} |")
    lines += _spent_lines(comparison, ("before", "after"))
    lines += ["", "## Case by case", "", f"| Case | Host | {first.capitalize()} | {second.capitalize()} | |",
              "| --- | --- | --- | --- | --- |"]
    for change in comparison.changes:
        flag = {"regression": "**regression**", "improvement": "**improvement**"}.get(change.flag, change.flag)
        lines.append(f"| {change.case} | {change.host} | {_rate_text(change.before, change.score_before)} | "
                     f"{_rate_text(change.after, change.score_after)} | {flag} |")
    lines += ["", f"{len(comparison.regressions)} regression(s), {len(comparison.improvements)} improvement(s) "
                  f"over {len(comparison.changes)} (case, host) cell(s)."]
    return "\n".join(lines) + "\n"


def _spent_lines(comparison: Comparison, sides: tuple[str, str], swap: bool = False) -> list[str]:
    """Tokens per run and cost per host on each side (named `sides`; `swap` shows the after side first)."""
    spent = [h for h in comparison.hosts if h.spent_before and h.spent_after
             and (h.spent_before.counted or h.spent_after.counted or h.spent_before.priced or h.spent_after.priced)]
    if not spent:
        return []
    first, second = sides
    lines = ["", "## Tokens and cost", "",
             f"| Host | Tokens per run {first} | Tokens per run {second} | Cost {first} | Cost {second} |",
             "| --- | --- | --- | --- | --- |"]
    for host in spent:
        one, other = (host.spent_after, host.spent_before) if swap else (host.spent_before, host.spent_after)
        assert one is not None and other is not None
        lines.append(f"| {host.host} | {one.tokens_text()} | {other.tokens_text()} | {one.cost_text()} | "
                     f"{other.cost_text()} |")
    return lines


def _lift_markdown(comparison: Comparison) -> str:
    """A comparison of a skill run with a baseline run: the lift per host, then case by case with and without."""
    skill_first = comparison.baseline == "after"
    skill = comparison.skill_before if skill_first else comparison.skill_after
    lines = ["# Is the skill better than no skill? — the lift", "", lift.intro(skill), ""]
    lines += [f"> ⚠ {warning}" for warning in comparison.warnings]
    lines += ["", "## Per host", "", *table_lines(*lift.table(comparison.lifts))]
    lines += ["", "Scores, with the skill against without it (Wilcoxon signed-rank on per-case mean scores):", ""]
    rows = []
    for host in comparison.hosts:
        scored_with, scored_without = (host.score_before, host.score_after) if skill_first else \
            (host.score_after, host.score_before)
        higher, lower = (host.scores.worse, host.scores.better) if skill_first else \
            (host.scores.better, host.scores.worse)
        rows.append([host.host, _mean_text(scored_with), _mean_text(scored_without), str(higher), str(lower),
                     str(host.scores.ties), f"{host.scores.p:.4g}", host.scores.verdict])
    lines += table_lines(["Host", "Mean score with the skill", "Without", "Higher with the skill",
                          "Higher without", "Ties", "p", "Verdict"], rows)
    lines += _spent_lines(comparison, ("with the skill", "without"), swap=not skill_first)
    lines += ["", "## Case by case", "", "| Case | Host | With the skill | Without | |",
              "| --- | --- | --- | --- | --- |"]
    helps = hurts = 0
    for change in comparison.changes:
        with_skill, without = (change.before, change.after) if skill_first else (change.after, change.before)
        flag = change.flag
        if flag in ("regression", "improvement"):
            helped = (flag == "regression") is skill_first  # before → after, read as with → without
            helps, hurts = helps + helped, hurts + (not helped)
            flag = "**the skill helps**" if helped else "**the skill hurts**"
        else:
            flag = {"new": "without only" if skill_first else "with only",
                    "gone": "with only" if skill_first else "without only"}.get(flag, flag)
        lines.append(f"| {change.case} | {change.host} | {_rate_text(with_skill)} | {_rate_text(without)} | {flag} |")
    lines += ["", f"The skill helps in {helps} and hurts in {hurts} of {len(comparison.changes)} (case, host) "
                  "cell(s)."]
    return "\n".join(lines) + "\n"
