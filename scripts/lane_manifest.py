"""What a lane's environment holds and where each package came from (scripts/setup.sh helper).

Run with the lane's own Python:
  missing REQFILE                     names in REQFILE not installed (space separated)
  own-constraints LOCK                pip constraints for the `own` lane: every package the Python
                                      already has, pinned to its version; the lock for the rest
  write LANE LOCK TOP SRC             the manifest (JSON) that every result records as env.lane
  venv-sites                          this Python's site-packages when it is itself a virtualenv
                                      (one per line; nothing otherwise)
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import re
import sys
from pathlib import Path

# The torch build decides these; a reused torch keeps its own.
TORCH_FAMILY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: str) -> list:
    """Package names of a requirements file (comments, extras and versions dropped)."""
    names = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(re.split(r"[\[<>=!~; ]", line, maxsplit=1)[0])
    return names


def lock_pins(path: str) -> dict:
    """{canonical name: 'name==version'} of a lock file (empty when it does not exist yet)."""
    pins = {}
    if Path(path).exists():
        for line in Path(path).read_text().splitlines():
            if "==" in line and not line.startswith("#"):
                pins[canonical(line.split("==", 1)[0])] = line.strip()
    return pins


def visible() -> dict:
    """{canonical name: (version, location)} of every distribution this Python can import."""
    found = {}
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name and canonical(name) not in found:
            found[canonical(name)] = (dist.version, str(dist.locate_file("")))
    return found


def in_venv(location: str) -> bool:
    return Path(location).resolve().is_relative_to(Path(sys.prefix).resolve())


def missing(req: str) -> list:
    have = visible()
    return [n for n in requirement_names(req) if canonical(n) not in have]


def own_constraints(lock: str) -> list:
    """Every visible distribution pinned to its version, then the lock's pins for the rest (the
    torch family left out when torch is reused: the reused torch keeps its own)."""
    have = visible()
    lines = [f"{name}=={version}" for name, (version, _) in sorted(have.items())
             if re.fullmatch(r"[0-9][0-9A-Za-z.+!_-]*", version)]
    torch_reused = "torch" in have
    for name, pin in lock_pins(lock).items():
        if name not in have and not (torch_reused and TORCH_FAMILY.match(name)):
            lines.append(pin)
    return lines


def manifest(lane: str, lock: str, *reqs: str) -> dict:
    """Lane, lock and each top-level package's version and origin (reused from the Python the
    lane was built on, or installed into the lane's own environment)."""
    have = visible()
    packages = {}
    for req in reqs:
        for name in requirement_names(req):
            version, location = have.get(canonical(name), (None, ""))
            origin = None if version is None else ("installed" if in_venv(location) else "reused")
            packages[canonical(name)] = {"version": version, "origin": origin}
    lock_path = Path(lock)
    return {
        "lane": lane,
        "python": sys.version.split()[0],
        "base_python": getattr(sys, "_base_executable", sys.executable),
        "system_site_packages": sys.prefix != sys.base_prefix and not _isolated(),
        "lock": str(lock_path) if lane != "own" and lock_path.exists() else None,
        "lock_sha256": (hashlib.sha256(lock_path.read_bytes()).hexdigest()
                        if lane != "own" and lock_path.exists() else None),
        "packages": packages,
        "reused": sorted(n for n, p in packages.items() if p["origin"] == "reused"),
        "installed": sorted(n for n, p in packages.items() if p["origin"] == "installed"),
    }


def venv_sites() -> list:
    """The site-packages of this Python when it is a virtualenv: what a venv made from it with
    --system-site-packages does not see (that flag names the base interpreter's)."""
    import site

    return site.getsitepackages() if sys.prefix != sys.base_prefix else []


def _isolated() -> bool:
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    text = cfg.read_text() if cfg.exists() else ""
    return not re.search(r"include-system-site-packages\s*=\s*true", text)


def main(argv: list) -> int:
    command, args = argv[0], argv[1:]
    if command == "missing":
        print(" ".join(missing(args[0])))
    elif command == "own-constraints":
        print("\n".join(own_constraints(*args)))
    elif command == "venv-sites":
        print("\n".join(venv_sites()))
    elif command == "write":
        print(json.dumps(manifest(*args), indent=1, sort_keys=True))
    else:
        print(f"lane_manifest: unknown command {command!r}; allowed: missing, own-constraints, venv-sites, write",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
