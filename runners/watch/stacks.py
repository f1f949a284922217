"""Python stacks as py-spy and faulthandler dump them: the one parser the watchdog (the
stack top in a hang's diagnosis) and the analysis (the deadlock report) share."""

from __future__ import annotations

import re

PYSPY_THREAD_RE = re.compile(r'^Thread\s+(?P<id>\S+)\s+\((?P<state>[^)]*)\):\s*"?(?P<name>[^"]*)"?')
PYSPY_FRAME_RE = re.compile(r"^\s+(?P<func>\S.*?) \((?P<file>[^()]*?):(?P<line>\d+)\)\s*$")
FH_THREAD_RE = re.compile(r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-f]+)")
FH_FRAME_RE = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
# Where our own code lives; the first such frame says what the rank was doing.
OWN_CODE = ("runners/",)


def short_path(path: str) -> str:
    """Library-relative file path: site-packages/torch/x.py -> torch/x.py."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    m = re.search(r"/lib/python3\.\d+/(.*)", path)
    if m:
        return m.group(1)
    for own in OWN_CODE:
        if "/" + own in path:
            return own + path.split("/" + own, 1)[1]
    return path


def parse_stack_text(text: str) -> list:
    """Threads of a py-spy dump or a faulthandler dump: [{name, state, frames}], innermost first."""
    threads = []
    for line in text.splitlines():
        m = PYSPY_THREAD_RE.match(line)
        if m and not line.startswith("Thread 0x"):
            threads.append({"name": m.group("name") or m.group("id"), "state": m.group("state"),
                            "frames": []})
            continue
        m = FH_THREAD_RE.match(line)
        if m:
            name = "current thread" if m.group("current").startswith("Current") else m.group("id")
            threads.append({"name": name, "state": "", "frames": []})
            continue
        if not threads:
            continue
        m = PYSPY_FRAME_RE.match(line) or FH_FRAME_RE.match(line)
        if m:
            threads[-1]["frames"].append(f"{m.group('func')} ({short_path(m.group('file'))}:{m.group('line')})")
    return threads


def main_first(threads: list) -> list:
    """The thread that runs the training loop first (py-spy: MainThread; faulthandler: the last
    listed thread is usually the main one, since it dumps the signal-handling thread first)."""
    main = [t for t in threads if t["name"] == "MainThread"]
    if not main and threads:
        main = [t for t in threads if t["name"] == "current thread"] or threads[-1:]
    return main + [t for t in threads if t not in main]


def other_threads(text: str, n: int = 12) -> list:
    """The threads of a dump beside the main one: [{name, frames}] with their innermost `n`
    frames (a loader's own threads, e.g. GraphBolt's prefetch thread; enough frames to reach
    the thread's entry, which says whose thread it is)."""
    return [{"name": t["name"], "frames": t["frames"][:n]} for t in main_first(parse_stack_text(text))[1:]]


def top_frames(text: str, n: int = 4) -> list:
    """The innermost `n` frames of the main thread of a dump ('func (file:line)')."""
    threads = main_first(parse_stack_text(text))
    return threads[0]["frames"][:n] if threads else []
