"""Repeats where an answer is still open: plan a sweep's second round from its first.

    python -m analysis.repeats.second_round --precision 0.05 --budget-min 4 --max-repeats 6 \
        --out results/plan/repeats.json results/runs/small/*/result.json

The report answers with ratios of timing runs' steady epoch times: each framework over the
reference (PyG over DGL), 2 devices over 1, 1 loader worker over none, batch 1024 over 256, a
framework's other loader over its first (DGL's GraphBolt over its classic DataLoader), a
framework's trimmed layers over its untrimmed ones (PyG's trim_to_layer; a point's last key holds
the variant, another loader or the trimming), and a trimmed framework over the reference (trimmed
PyG over DGL, the gap trimming leaves: its points differ in framework and variant). Each
comparison's 95% interval rests on the launch noise pooled over the experiment's configurations
(analysis.repeats.noise), and each first-screen
answer is the geometric mean of its comparisons over the configurations (per model for the
framework, loader and trimming questions, per framework for devices, workers and batch size) with
its own interval.
The first round runs every point a few times. This plans more repeats for the answers whose
interval is still wider than the precision asked for, within a time budget, and says why each
point got them. It aims a little inside the precision (AIM_MARGIN), since the report judges each
answer on the noise fitted after the round, which the round's own runs move.

It stops on the width of an interval, never on where the interval lies: an answer that already
excludes 1x but is wider than the precision still gets repeats, and one that is narrow gets
none even if it straddles 1x. So the second round never depends on the estimate, and the
estimates stay unbiased.

The projection uses the report's launch noise (analysis.repeats.noise): per experiment (a loader is
one), log epoch time fitted as configuration + block (repeat x model), and the noise left within
the blocks, on its degrees of freedom; never a point's own spread (two or three repeats estimate
it poorly; two equal times would say zero). A comparison across experiments (a loader over the
framework's first, or trimmed layers over untrimmed) takes the noise of those two loaders' timing
runs fitted together, as the report's loaders and trimming tables pool them
(analysis.variants.pairing). Where Bartlett's test finds a pool's spreads unequal, the report splits
it (by model, framework, ...) and so does the plan, with the report's own rule (noise.split);
a comparison whose points the split put apart takes each side's spread without blocks, as the
report's does.

The budget buys settled answers first: of the answers still open, the one that is cheapest to
settle (in seconds, projected) gets one more repeat block, and the costs are projected again. A
block is one more run at every point of the answer (those with the fewest runs of this round), all
with the same repeat number, the round's next: the report fits log epoch time as configuration +
block (repeat x model), so a
second-round run that lands in a block without the other points of its comparisons tells the
report nothing, however much a projection per run promised. So the projection is the block fit's
own: the fitted SD times c'(X'X)^+c of the design with the planned runs in their blocks, on that
design's degrees of freedom. Once no open answer can be settled within what is
left of the budget and --max-repeats, what is left narrows the widest open answer, a block at a
time, until the budget or the cap stops it. (Widest-first from the start spends a small budget on
an answer it cannot settle, and leaves open one that a few runs would have settled.) Each
comparison's row says whether it is settled on its own (interval within the precision) and, if not,
what it would cost (runs and minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from analysis.repeats import plan_file
from analysis.repeats.plan_points import POINT_KEYS, Point, first_round_points
from analysis.report.sections import DEFAULT_LOADER, ratios
from analysis.stats import noise_dof
from runners.rank.stopping import t_quantile

ACROSS = "across loaders"  # launch_noise's key of two loaders' runs fitted together: "across loaders: LOADER"
SETTLE_CAP = 10  # repeats a point at most in the report's cost of settling an open answer (each a block fit: 0.1-2.4 s)
# The plan aims this far inside the precision: the report judges an answer on the noise fitted
# after the round, and the round's runs move that estimate (with 50 dof and 10 more, its SD by
# about 4 % either way), so a plan to the precision itself ends just outside it about half the time.
AIM_MARGIN = 0.05


@dataclass
class Comparison:
    axis: str
    num: Point
    den: Point
    ratio: object  # its sections.Ratio

    def label(self) -> str:
        fw, model, devices, batch, workers, _ = self.den.key
        where = {"framework": f"{model} d{devices} b{batch} w{workers}",
                 "devices": f"{fw} {model} b{batch} w{workers}",
                 "workers": f"{fw} {model} d{devices} b{batch}",
                 "batch_size": f"{fw} {model} d{devices} w{workers}",
                 "loader": f"{fw} {model} d{devices} b{batch} w{workers}"}[self.ratio.column]
        return f"{self.ratio.words} ({where})"

    def answer(self) -> str:
        """The first-screen answer this comparison is part of: per model for the framework and
        loader questions, per framework for the others; a comparison within another loader's
        runs (GraphBolt at 2 devices over 1) is an answer of that loader's, not on the first screen."""
        fw, model, loader = self.den.key[0], self.den.key[1], self.den.key[-1]
        if self.ratio.column in ("framework", "loader"):
            return f"{self.ratio.words}, {model}"
        return f"{self.ratio.words}, {fw}" + ("" if loader == DEFAULT_LOADER else f" {loader}")

    def answer_key(self) -> tuple:
        """(axis, model or framework): the first-screen answer this comparison is part of, as the
        report's answers key their intervals (analysis.report.answers)."""
        fw, model = self.den.key[0], self.den.key[1]
        return (self.axis, model if self.ratio.column in ("framework", "loader") else fw)

    def on_first_screen(self) -> bool:
        """Whether the report's first screen states this comparison's answer (its main experiment:
        the frameworks' first loaders, and a loader over the first)."""
        return self.ratio.column == "loader" or self.den.key[-1] == DEFAULT_LOADER


def combined_half_width(parts: list) -> float:
    """Half-width of the geometric mean over configurations of comparisons whose log ratios have
    (variance, dof) each: the variances add, over the count squared, and the smallest dof is kept
    (stats.combined_ratio)."""
    if not parts or not all(dof > 0 for _, dof in parts):
        return float("inf")
    se = math.sqrt(sum(v for v, _ in parts)) / len(parts)
    return math.exp(t_quantile(min(dof for _, dof in parts)) * se) - 1


def comparisons(points: dict) -> list:
    """Every pair of first-round points the report compares (same everything but one axis, and the
    variant where the ratio names the numerator's)."""
    out = []
    for axis, ratio in ratios().items():
        key_name, num_value, den_value = ratio.column, ratio.numerator, ratio.denominator
        i = POINT_KEYS.index(key_name)
        for key, den in points.items():
            if key[i] != den_value or (ratio.numerator_variant and key[-1] != DEFAULT_LOADER):
                continue
            num_key = key[:i] + (num_value,) + key[i + 1:]
            num = points.get(num_key[:-1] + (ratio.numerator_variant,) if ratio.numerator_variant else num_key)
            if num is not None:
                out.append(Comparison(axis, num, den, ratio))
    return out


@dataclass
class Plan:
    precision: float
    budget_s: float
    max_repeats: int
    pooled_sd: float  # the main experiment's (the framework's first loader), for the plan's file
    pooled_dof: int = 0
    spent_s: float = 0.0
    comparisons: list = field(default_factory=list)  # rows for the report
    answers: list = field(default_factory=list)  # rows for the report
    noise: dict = field(default_factory=dict)  # group -> (SD, dof): each pool's launch noise, split as the report's
    group_of: dict = field(default_factory=dict)  # (pool, point key) -> its group in `noise`
    first_round: int = 0  # the repeat of this round's first block
    points: list = field(default_factory=list)  # the plan's points (their `added`: the repeats planned)
    _designs: dict = field(default_factory=dict, repr=False)  # contrast_factor's designs, by planned repeats

    def to_json(self, points: dict, first_round: int) -> dict:
        runs = []
        for p in points.values():
            runs += [{**p.run, "repeat": rep} for rep in p.kept]
            runs += [{**p.run, "repeat": rep} for rep in self.planned_repeats(p)]
        return {"precision": self.precision, "aim": self.aim, "budget_s": self.budget_s, "max_repeats": self.max_repeats,
                "first_round": first_round, "pooled_log_sd": self.pooled_sd, "pooled_dof": self.pooled_dof,
                "noise": {loader: {"log_sd": sd, "dof": dof} for loader, (sd, dof) in self.noise.items()},
                "planned_s": round(self.spent_s, 1),
                "points": [{"point": p.label(), "first_round": p.first_ok,
                            "kept": len(p.kept), "added": p.added, "why": p.why}
                           for p in points.values() if p.added or p.kept],
                "answers": self.answers, "comparisons": self.comparisons, "runs": runs}

    @property
    def aim(self) -> float:
        """The half-width the plan buys repeats to (AIM_MARGIN inside the precision)."""
        return self.precision * (1 - AIM_MARGIN)

    def planned_repeats(self, p: Point) -> list:
        """The repeat numbers of the runs planned at `p`: this round's next, after the runs an
        earlier second round left (`kept`), as main's plan numbers them, so that the runs of one
        block (the k-th of the round at each point) share their repeat whatever each point's first
        round held."""
        return [self.first_round + len(p.kept) + k for k in range(p.added)]

    def planned_blocks(self, p: Point) -> list:
        """The blocks (repeat x model) of the runs planned at `p`, as Point.blocks names them."""
        return [(str(rep), str(p.key[1])) for rep in self.planned_repeats(p)]

    def sides(self, c) -> tuple:
        """(sd_a, dof_a, sd_b, dof_b) of a comparison: its pool's noise (pool_of), its dof grown by
        the repeats planned so far (dof_growth)."""
        out = ()
        for p in (c.num, c.den):
            group = self.group_of.get((pool_of(c), p.key))
            sd, dof = self.noise.get(group, (self.pooled_sd, self.pooled_dof))
            out += (sd, dof + self.dof_growth(group))
        return out

    def group(self, c) -> str | None:
        """The noise group that holds both points of a comparison (None: the split put them apart)."""
        a, b = (self.group_of.get((pool_of(c), p.key)) for p in (c.num, c.den))
        return a if a == b else None

    def members(self, group: str | None) -> list:
        """The points whose runs a noise group holds."""
        keys = {key for (_, key), g in self.group_of.items() if g == group}
        return [p for p in self.points if p.key in keys]

    def dof_growth(self, pool: str) -> int:
        """Degrees of freedom the planned repeats add to a pool's noise fit: a run adds one, but the
        first run of a block (repeat x model) that held none of the pool's runs adds none."""
        pts = self.members(pool)
        seen, added = {b for p in pts for b in p.blocks()}, 0
        for b in [b for p in pts for b in self.planned_blocks(p)]:
            added, seen = added + (b in seen), seen | {b}
        return added

    def part(self, c, n_a: int, n_b: int) -> tuple:
        """(variance, dof) of a comparison's log ratio with n_a and n_b repeats a side."""
        sd_a, dof_a, sd_b, dof_b = self.sides(c)
        va, vb = sd_a * sd_a / n_a, sd_b * sd_b / n_b
        return va + vb, noise_dof(sd_a, dof_a, va, sd_b, dof_b, vb)

    def answer_width(self, cs: list) -> float:
        """An answer's projected half-width at the repeats planned so far."""
        return combined_half_width([self.projected_part(c) for c in cs])

    def projected_part(self, c) -> tuple:
        """(variance, dof) of a comparison's log ratio as the report's block fit will give it once
        the planned repeats have run: the fitted SD squared times c'(X'X)^+c of the design with
        the planned runs in their blocks, on that design's dof. A run whose block holds no other
        point of its comparison's chain narrows nothing here, as in the report (the per-run
        formula, `part`, counted it). `part` where the pool has no fit."""
        pool = self.group(c)
        got = self.contrast_factor(pool, c.num.key, c.den.key) if pool in self.noise else None
        if got is None:
            return self.part(c, c.num.n, c.den.n)
        sd, (factor, dof) = self.noise[pool][0], got
        return sd * sd * factor, dof

    def contrast_factor(self, pool: str, a: tuple, b: tuple):
        """(c'(X'X)^+c, dof) of cells a - b in the block design (configuration + repeat x model) of
        the group's runs, done and planned (planned_repeats numbers them); None where the design
        cannot tell the two apart."""
        from analysis.repeats.noise import design_fit

        state = (pool, tuple(p.added for p in self.points))
        if state not in self._designs:
            cell_blocks = {}
            for p in self.members(pool):
                cell_blocks[p.key] = p.blocks() + self.planned_blocks(p)
            self._designs[state] = design_fit(cell_blocks)
        design = self._designs[state]
        got = design.contrast(a, b) if design is not None else None
        return None if got is None else (got[1] ** 2, got[2])

    def next_block(self, cs: list) -> list:
        """The points one more repeat of the answer `cs` runs: those of its points below
        --max-repeats with the fewest runs in this round, so that every such point of the answer
        has a run in the round's next block (repeat x model; planned_repeats numbers it); [] when
        all are at the cap. The report fits log epoch time as configuration + block, so a run alone
        in its block tells it nothing, and one beside only some of its comparison's points tells it
        little: a repeat buys a whole block. (Points whose first rounds differ, PyG's trimmed runs
        at 2 repeats beside 3 untrimmed, still share the round's blocks.)"""
        pts = [p for p in {id(p): p for c in cs for p in (c.num, c.den)}.values() if p.n < self.max_repeats]
        level = min((len(p.kept) + p.added for p in pts), default=None)
        return [p for p in pts if len(p.kept) + p.added == level]

    def cost_to_settle(self, cs: list, left_s: float) -> float:
        """Seconds of repeats that would bring the answer `cs` to the plan's aim (inside the
        precision), a block at a time as `spend` buys them; inf where `left_s` or the cap cannot."""
        added, cost = [], 0.0
        try:
            while self.answer_width(cs) > self.aim:
                block = self.next_block(cs)
                block_s = sum(p.cost_s for p in block)
                if not block or cost + block_s > left_s:
                    return float("inf")
                for p in block:
                    p.added += 1
                added += block
                cost += block_s
            return cost
        finally:
            for p in added:
                p.added -= 1

    def spend(self, answers: dict, measured: dict) -> None:
        """One more repeat block at a time: for the open answer cheapest to settle; once no open
        answer can be settled with what is left of the budget (within --max-repeats), for the
        widest one, until the budget or the cap stops it."""
        open_ = [name for name in answers if measured[name] > self.aim]
        while True:
            left = self.budget_s - self.spent_s
            wanting = [a for a in open_ if self.answer_width(answers[a]) > self.aim]
            costs = {a: self.cost_to_settle(answers[a], left) for a in wanting}
            settle = [a for a in wanting if costs[a] < float("inf")]
            if settle:
                name = min(settle, key=lambda a: (costs[a], a))
            else:
                fits = [a for a in wanting
                        if (b := self.next_block(answers[a])) and sum(p.cost_s for p in b) <= left]
                if not fits:
                    break
                name = max(fits, key=lambda a: (self.answer_width(answers[a]), a))
            for p in self.next_block(answers[name]):
                p.added += 1
                self.spent_s += p.cost_s
                if name not in p.why:
                    p.why.append(name)

    def answer_row(self, name: str, cs: list, measured: float) -> dict:
        """The report's row of one answer: its interval's half-width before and after the repeats."""
        after = self.answer_width(cs)
        return {
            "answer": name, "comparisons": len(cs), "measured_half_width": round(measured, 4),
            "added": sum(c.num.added + c.den.added for c in cs),
            "projected_half_width": round(after, 4), "first_screen": cs[0].on_first_screen(),
            "status": ("settled after round 1" if measured <= self.precision
                       else "settled by the repeats added" if after <= self.precision
                       else "open: over the budget or at --max-repeats" if cs[0].on_first_screen()
                       else "open: not a first-screen answer, so no repeats of its own")}

    def comparison_row(self, c) -> dict:
        """The report's row of one comparison, with what settling it on its own would cost."""
        precision = self.precision
        before = self.width(c, len(c.num.times), len(c.den.times))
        after = self.width(c, c.num.n, c.den.n)
        extra = self.repeats_to_settle(c)
        cost = extra * (c.num.cost_s + c.den.cost_s) / 2 if extra > 0 else 0.0
        return {
            "comparison": c.label(), "answer": c.answer(), "runs": f"{len(c.num.times)}+{len(c.den.times)}",
            "measured_half_width": round(before, 4), "added": f"{c.num.added}+{c.den.added}",
            "projected_half_width": round(after, 4),
            "to_settle_runs": extra, "to_settle_min": round(cost / 60, 1),
            "status": ("settled" if after <= precision
                       else f"open: {extra} more runs (about {cost / 60:.1f} min) would settle it" if extra > 0
                       else "open: more than 200 runs would be needed")}

    def width(self, c, n_a: int, n_b: int) -> float:
        """Relative half-width of one comparison's 95% interval with n_a and n_b repeats a side."""
        return combined_half_width([self.part(c, n_a, n_b)])

    def repeats_to_settle(self, c) -> int:
        """Runs to add to one comparison (split between the sides, the smaller first) until its
        interval is within the precision; -1 if 200 would not do."""
        n_a, n_b = c.num.n, c.den.n
        for extra in range(0, 201):
            a = n_a + (extra + (n_a <= n_b)) // 2
            if self.width(c, a, n_b + extra - (a - n_a)) <= self.precision:
                return extra
        return -1


def pool_of(c: Comparison) -> str:
    """The launch-noise pool of a comparison: its experiment (a loader), or for one across loaders
    (a loader or the trimming over the framework's first, trimmed PyG over DGL) the two loaders'
    runs fitted together, as the report's loaders and trimming tables pool them."""
    a, b = c.num.key[-1], c.den.key[-1]
    return a if a == b else across(b if a == DEFAULT_LOADER else a)


def across(loader: str) -> str:
    return f"{ACROSS}: {loader}"


def launch_noise(points: dict) -> tuple:
    """({group: (SD, dof)}, {(pool, point key): group}): each pool's launch noise as the report
    computes it (analysis.repeats.noise: log epoch time = configuration + block, the noise within
    the blocks), a pool being an experiment (a loader) or another loader (or the trimming) with
    the first loader's runs (across), as the report's loaders and trimming tables pool them
    (analysis.variants.pairing); split where Bartlett's test finds the spreads unequal, by the
    report's rule (noise.split), a part named by where it holds ("across loaders: trim (model
    gat)"). A group whose fit leaves no degrees of freedom gets no noise (its comparisons take the
    plan's fallback, the main experiment's noise)."""
    from analysis.repeats.noise import SPLIT_AXES, fit_blocks, split

    cells: dict = {}
    for p in points.values():
        if p.times:
            cells.setdefault(p.key[-1], {})[p.key] = ([math.log(t) for t in p.times], p.blocks())
    for loader in [v for v in cells if v != DEFAULT_LOADER]:
        cells[across(loader)] = {**cells.get(DEFAULT_LOADER, {}), **cells[loader]}
    noise, group_of = {}, {}
    cell_keys = ("pool", *POINT_KEYS)
    for pool, runs in cells.items():
        for g in split(pool, {(pool, *key): logs for key, (logs, _) in runs.items()}, cell_keys,
                       ("loader", *SPLIT_AXES)):
            name = pool + (f" ({g.label()})" if g.where else "")
            keys = [key for key in runs if g.holds((pool, *key), cell_keys)]
            group_of.update({(pool, key): name for key in keys})
            fit = fit_blocks({key: runs[key] for key in keys})
            if fit is not None and fit.dof > 0:
                noise[name] = (fit.sd, fit.dof)
    return noise, group_of


def pooled_spread(points: dict) -> tuple:
    """(SD, dof): log epoch time's variance between launches pooled over the points (analysis.repeats.noise)."""
    from analysis.repeats.noise import pooled_variance

    var, dof = pooled_variance([[math.log(t) for t in p.times] for p in points.values()])
    return (math.sqrt(var) if dof else 0.0), dof


def _answers(points: dict, precision: float, budget_s: float, max_repeats: int,
             first_round: int | None = None) -> tuple:
    """(Plan with no repeats yet, its comparisons, {answer: comparisons}, {answer: half-width now})."""
    noise, group_of = launch_noise(points)
    sd, dof = noise.get(DEFAULT_LOADER) or pooled_spread(points)
    if first_round is None:  # the report's projection from all runs: the round starts after every run's repeat
        first_round = 1 + max((r for p in points.values() for r in p.repeats), default=-1)
    result = Plan(precision, budget_s, max_repeats, sd, dof, noise=noise, group_of=group_of, first_round=first_round,
                  points=list(points.values()))
    comps = [c for c in comparisons(points) if c.num.times and c.den.times]
    answers: dict = {}
    for c in comps:
        answers.setdefault(c.answer(), []).append(c)
    return result, comps, answers, {name: result.answer_width(cs) for name, cs in answers.items()}


def plan(points: dict, precision: float, budget_s: float, max_repeats: int, first_round: int | None = None) -> Plan:
    """Add repeats to `points` (their `added` and `why`) for the open answers; `first_round`: the
    repeats the first round ran (the round's runs are numbered from it; None: after the last)."""
    result, comps, answers, measured = _answers(points, precision, budget_s, max_repeats, first_round)
    result.spend({name: cs for name, cs in answers.items() if cs[0].on_first_screen()}, measured)
    result.answers += [result.answer_row(name, cs, measured[name]) for name, cs in answers.items()]
    result.comparisons += [result.comparison_row(c) for c in comps]
    return result


def settling_cost(points: dict, precision: float, keys: list, max_repeats: int = SETTLE_CAP) -> dict:
    """What would settle the first-screen answers `keys` (Comparison.answer_key) that are still
    wider than `precision` on `points` (all the runs so far): the repeats the planner would add
    with no time budget, spent as `spend` spends them (cheapest answer first, a whole repeat block
    at a time), a point's repeats capped at `max_repeats`.
    {"runs", "seconds", "settled": whether the cap allows it, "answers": keys still open}."""
    result, _, answers, measured = _answers(points, precision, float("inf"), max_repeats)
    wanted = {name: cs for name, cs in answers.items()
              if cs[0].on_first_screen() and cs[0].answer_key() in set(keys) and measured[name] > precision}
    result.spend(wanted, measured)
    cost = {"runs": sum(p.added for p in points.values()), "seconds": result.spent_s,
            "settled": all(result.answer_width(cs) <= precision for cs in wanted.values()),
            "answers": [cs[0].answer_key() for cs in wanted.values()]}
    for p in points.values():
        p.added, p.why = 0, []
    return cost


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.repeats.second_round", description=__doc__.split("\n")[0])
    p.add_argument("--precision", type=float, required=True, help="relative 95%% half-width wanted, e.g. 0.05")
    p.add_argument("--budget-min", type=float, required=True, help="minutes the second round may take")
    p.add_argument("--max-repeats", type=int, required=True, help="repeats per point at most, both rounds")
    p.add_argument("--out", required=True)
    p.add_argument("results", nargs="*")
    args = p.parse_args(argv)
    if not 0 < args.precision < 1:
        p.error(f"--precision {args.precision}: give a fraction between 0 and 1 (0.05 is ±5%)")
    if args.budget_min < 0 or args.max_repeats < 2:
        p.error(f"--budget-min {args.budget_min} must be >= 0 and --max-repeats {args.max_repeats} >= 2")
    points, first_round = first_round_points(args.results)
    planned = plan(points, args.precision, args.budget_min * 60, args.max_repeats, first_round)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # an earlier plan made from another first round is kept under previous/, not overwritten
    # (the workflow's checkpoint flags the plan update(), so Snakemake leaves it here for this)
    said = plan_file.set_aside_stale_plan(out, args.results)
    if said:
        print(f"adaptive: {said}", file=sys.stderr)
    doc = planned.to_json(points, first_round)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"adaptive: {len(doc['runs'])} more runs at {len(doc['points'])} points, about "
          f"{doc['planned_s'] / 60:.1f} of {args.budget_min:g} min; {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
