"""A sweep's second-round plan file (results/plan/repeats.json) and whether it still holds: the
workflow asks at parse time (workflows/rules/adaptive.smk), and the planner
(analysis.repeats.second_round) sets a stale one aside before it writes the new one."""

from __future__ import annotations

import time
from pathlib import Path


def stale_plan(plan: Path, first_round: list) -> str | None:
    """Why a plan is stale: a first-round result it was made from is gone or newer than the
    plan (None: the plan still holds, or there is none). Reads only; the workflow asks at parse
    time, so even a dry run says so without moving anything."""
    plan = Path(plan)
    if not plan.exists():
        return None
    made = plan.stat().st_mtime
    missing = [r for r in first_round if not Path(r).exists()]
    newer = [r for r in first_round if r not in missing and Path(r).stat().st_mtime > made]
    if missing:
        return f"{len(missing)} of {len(first_round)} results it was made from are gone, e.g. {missing[0]}"
    if newer:
        return f"{len(newer)} of {len(first_round)} results are newer, e.g. {newer[0]}"
    return None


def set_aside_stale_plan(plan: Path, first_round: list) -> str | None:
    """Move a stale plan (stale_plan) to previous/ and say so (None: it still holds, or there is
    none, and it stays where it is).

    The checkpoint that makes the plan calls it (main, --out) before it writes the new one, so a
    stale plan is set aside when the sweep runs, never when the workflow is parsed; the workflow
    reads a plan that still holds directly and leaves a stale one to the checkpoint
    (workflows/rules/adaptive.smk).
    """
    plan = Path(plan)
    why = stale_plan(plan, first_round)
    if why is None:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(plan.stat().st_mtime))
    aside = plan.parent / "previous" / f"{plan.stem}-{stamp}{plan.suffix}"
    aside.parent.mkdir(parents=True, exist_ok=True)
    plan.replace(aside)
    return f"the adaptive plan {plan} is stale ({why}): moved to {aside}; it is made again after the first round"
