"""The report's sections in page order, each declared once: its anchor, its title (the question it
answers, as the navigation, its heading and the first screen all say it) and, where the answer is
a ratio the second round can settle with more repeats, what that ratio compares (the speed
section: each framework over the reference, runners.adapters.registry.REFERENCE_FRAMEWORK).

A new question is one `Section` here, naming the function that answers it on the first screen
(any module under analysis) and the tables it shows; the navigation, the first screen and the
page (a block of its own in the template, or the generic one: heading, answer, tables) follow
from the declaration, in its order.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from analysis import framework_label
from runners.adapters import registry

# A point's loader when it is its framework's first (aggregate's loader_variant).
DEFAULT_LOADER = "default"


@dataclass(frozen=True)
class Ratio:
    """One point's epoch time over another's that differs in `column` only, or also in its variant
    (its loader or trimming, the point key's last place) where `numerator_variant` names one: the
    denominator is then a framework's first loader."""
    column: str
    numerator: object
    denominator: object
    words: str  # how the report says it, e.g. "2 devices over 1"
    numerator_variant: str | None = None


@dataclass(frozen=True)
class Section:
    key: str  # its id on the page, which sentences link to
    title: str
    # axis -> Ratio, for the second round; or a function returning them, read at each use
    compares: object = field(default_factory=dict)
    conditional: bool = False  # on the page only where its answer is (the template's `answer`)
    # Where the first-screen answer comes from: "module:function" under analysis (or the function),
    # called with the answers' Frames and the main experiment; None: nothing on the first screen.
    answer: object = None
    # The tables (REPORT_TABLES names) a section without a block of its own in the template shows.
    tables: tuple = ()

    def ratios(self) -> dict:
        return self.compares() if callable(self.compares) else self.compares


def framework_axis(name: str) -> str:
    """The axis of framework `name`'s ratio over the reference (the second round's and the answers' key)."""
    return f"framework:{name}"


def framework_ratios() -> dict:
    """Each framework's epoch time over the reference's (registry.reference_pairs), by framework_axis;
    read at each call, so that a framework declared later is compared too."""
    return {framework_axis(a): Ratio("framework", a, b, f"{framework_label(a)} over {framework_label(b)}")
            for a, b in registry.reference_pairs(registry.FRAMEWORK_NAMES)}


def trim_axis(name: str) -> str:
    """The axis of framework `name`'s trimmed runs over the reference's (the second round's and the answers' key)."""
    return f"{registry.LAYER_TRIM}:{name}"


def trim_ratios() -> dict:
    """A framework's trimmed layers over its untrimmed ones (registry.LAYER_TRIM), and each framework
    that trims, trimmed, over the reference: how much of the gap trimming closes, and what is left."""
    out = {registry.LAYER_TRIM: Ratio("loader", registry.LAYER_TRIM, DEFAULT_LOADER, "trimmed layers over untrimmed")}
    for a, b in registry.reference_pairs(registry.FRAMEWORK_NAMES):
        f = registry.framework(a)
        if f.layer_trim:
            out[trim_axis(a)] = Ratio("framework", a, b, f"{f.label} with {f.layer_trim_label} over {framework_label(b)}",
                                      numerator_variant=registry.LAYER_TRIM)
    return out


SECTIONS = (
    Section("answers", "Answers"),
    Section("speed", "Which framework is faster?", framework_ratios, answer="report.first_screen:answer_speed"),
    # The layer trimming's answer sits under the framework answer (report.first_screen.answer_speed).
    Section("work", "Why is one framework slower?", trim_ratios),
    Section("loaders", "Classic DataLoader or GraphBolt?", {name: Ratio(
        "loader", name, DEFAULT_LOADER, f"{name} over the framework's first loader") for name in registry.OTHER_LOADERS},
        conditional=True, answer="report.first_screen:answer_loaders"),
    Section("scaling", "How far does each framework scale?",
            {"devices": Ratio("devices", 2, 1, "2 devices over 1")}, answer="report.first_screen:answer_scaling"),
    Section("projection", "What would more devices give?", conditional=True, answer="report.first_screen:answer_projection"),
    Section("speedup-gap", "Where does the missing speed-up go?"),
    Section("workers", "Do loader workers help?", {"workers": Ratio("workers", 1, 0, "1 loader worker over none")},
            answer="report.first_screen:answer_workers"),
    Section("batch", "What does batch size do?", {"batch_size": Ratio("batch_size", 1024, 256, "batch 1024 over 256")},
            answer="report.first_screen:answer_batch"),
    Section("breakdown", "Where does a step's time go?", answer="report.first_screen:answer_breakdown"),
    Section("deadlocks", "What hangs, and why?", answer="report.first_screen:answer_deadlocks"),
    Section("accuracy", "Do both frameworks learn the same?", answer="report.first_screen:answer_accuracy"),
    Section("study", "Why did the seed study see what it saw?"),
    Section("plan", "Plan the next sweep"),
    Section("lanes", "Lanes: the same graph on another torch"),
    Section("partitioned", "Past one machine's memory: replicated vs partitioned"),
    Section("resources", "CPU and memory over time"),
    Section("findings", "All findings, per experiment"),
    Section("environment", "Environment and fairness settings"),
    Section("invalid", "Malformed results"),
    Section("runs", "All runs and rerun commands"),
)


def ratios() -> dict:
    """Every ratio the report compares, by axis (the second round plans repeats for these)."""
    return {axis: ratio for s in SECTIONS for axis, ratio in s.ratios().items()}


def by_key() -> dict:
    """The sections by id (read at each call, so that a section declared later is found)."""
    return {s.key: s for s in SECTIONS}


def title(key: str) -> str:
    return by_key()[key].title


def answer_function(section: Section):
    """The function `section.answer` names (imported only when the first screen is made), or the
    function itself where the declaration holds one."""
    if callable(section.answer):
        return section.answer
    module, function = section.answer.split(":")
    return getattr(importlib.import_module(f"analysis.{module}"), function)
