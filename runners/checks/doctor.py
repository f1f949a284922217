"""Environment check: `python -m runners.checks.doctor [--json]`.

Prints the lane (pair, current, own; scripts/setup.sh), which frameworks it carries, Python and
torch versions, each framework's packages and installation facts (its registry entry's: PyG's
sampler backend, whether DGL has CUDA), visible GPUs and NVML status, cores, memory, /dev/shm and the open-files limit. Each framework is
imported and exercised (one sampled mini-batch, one forward pass) in its OWN subprocess,
because importing DGL changes process-wide settings (the checks live in the adapters). Exits 1
when a framework the lane carries is unusable; one the lane does not carry (DGL in `current`) is
listed with the reason its runs will be skipped.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from runners.adapters import registry
from runners.records import envinfo

FRAMEWORKS = registry.FRAMEWORK_NAMES


def check_framework(name: str) -> dict:
    """Import and exercise one framework in a subprocess; never raises."""
    try:
        code = f"from {registry.framework(name).adapter} import self_check; print(self_check())"
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=300, cwd=str(envinfo.REPO_ROOT))
    except subprocess.TimeoutExpired:
        return {"usable": False, "detail": "timed out after 300 s"}
    if res.returncode != 0:
        lines = [l for l in res.stderr.strip().splitlines() if l.strip()]
        return {"usable": False, "detail": lines[-1] if lines else f"exit code {res.returncode}"}
    return {"usable": True, "detail": res.stdout.strip().splitlines()[-1]}


def carried(env: dict) -> list:
    """Frameworks this lane is meant to run: those its requirement list names (pair: both;
    current: PyG), or in an own or unmanaged environment, those installed."""
    packages = env["lane"].get("packages") or {}
    if env["lane"]["lane"] in envinfo.LOCKED_LANES and packages:
        return [n for n in FRAMEWORKS if set(registry.framework(n).distributions) & set(packages)]
    return [n for n in FRAMEWORKS if envinfo.package_version(*registry.framework(n).distributions)]


def gib(n) -> str:
    return "unknown" if n is None else f"{n / 2**30:.1f} GiB"


def findings() -> dict:
    """The environment, each framework of the lane checked, the frameworks it does not carry, and
    the problems found: what `--json` prints and the text is made from."""
    env = envinfo.collect()
    checks = {name: check_framework(name) for name in carried(env)}
    absent = {name: envinfo.framework_unavailable(name, env) for name in FRAMEWORKS if name not in checks}
    problems = [f"{name}: {c['detail']}" for name, c in checks.items() if not c["usable"]]
    if envinfo.visible_gpu_count(env):
        # What each framework's own environment check (its registry entry) says of a GPU run here.
        for name in checks:
            refused, note = registry.framework(name).check_environment("cuda", env)
            problems += [f"GPUs are visible; {text}" for text in (refused, note) if text]
    return {"env": env, "lane": env["lane"]["lane"], "frameworks": checks, "not_in_lane": absent,
            "problems": problems}


def text_lines(report: dict) -> list:
    """The findings as aligned `name  value` lines."""
    env, checks = report["env"], report["frameworks"]
    lane = env["lane"]
    reused = ", ".join(f"{n} {lane['packages'][n]['version']}" for n in lane.get("reused", []))
    rows = [
        ("lane", lane["lane"] + (f" ({lane['reason']})" if lane.get("reason") else "")),
        ("lane reuses", reused or ("unknown" if lane["lane"] == "unmanaged"
                                   else "nothing (every package installed by the set-up)")),
        ("frameworks in lane", ", ".join(checks) or "none"),
        ("Python", env["python"]), ("torch", env["torch"]),
        # each framework's packages and installation facts, as its registry entry names them
        *((key, env.get(key) or "not installed") for key in registry.env_packages()),
        *((key, env.get(key)) for key in registry.env_facts()),
        ("GPUs visible", envinfo.visible_gpu_count(env)),
        ("NVML", "available" if env["nvml"]["available"] else f"unavailable: {env['nvml']['reason']}"),
        ("CPU", f"{env['cpu_model']} ({env['cpu_cores']} cores)"), ("memory", gib(env["memory_bytes"])),
        ("/dev/shm", gib(env["shm_bytes"])), ("open-files limit", env["open_files_limit"]),
        ("git commit", f"{env['git_commit']}{' (dirty)' if env['git_dirty'] else ''}"),
    ]
    for name, c in checks.items():
        rows.append((f"{name} usable", "yes" if c["usable"] else f"NO: {c['detail']}"))
    for name, why in report["not_in_lane"].items():
        rows.append((f"{name} usable", f"not in this lane; its runs are skipped: {why or 'not carried'}"))
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    args = p.parse_args(argv)
    report = findings()
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print("\n".join(text_lines(report)))
        for prob in report["problems"]:
            print(f"PROBLEM: {prob}", file=sys.stderr)
    return 1 if any(not c["usable"] for c in report["frameworks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
