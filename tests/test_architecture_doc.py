"""docs/architecture.md names every module: a module added without a line there fails here."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
TOPS = ("runners", "analysis", "benchmarks", "scripts")


def modules() -> list:
    """Every source module of the suite, as a path from the repository root."""
    found = []
    for top in TOPS:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in (".py", ".sh") or path.name in ("__init__.py", "__main__.py"):
                continue
            if "__pycache__" in path.parts:
                continue
            found.append(path.relative_to(ROOT))
    return found


def named(path: Path, text: str) -> bool:
    """A module is named by its file name in backticks (`run.py`, `adapters/pyg.py`,
    `scripts/setup.sh`) or, inside a package's row (`memory/`, `datasets/`), by its stem (`units`)."""
    spelled = {f"`{path.name}`", f"`{path.parent.name}/{path.name}`", f"`{path.as_posix()}`"}
    if any(s in text for s in spelled):
        return True
    package_row = re.search(rf"^\| `{re.escape(path.parent.name)}/` \|.*$", text, re.M)
    return bool(package_row and f"`{path.stem}`" in package_row.group(0))


def test_every_module_has_its_line_in_the_architecture_doc():
    text = DOC.read_text()
    missing = [str(p) for p in modules() if not named(p, text)]
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_a_module_the_doc_does_not_name_is_caught():
    assert not named(Path("runners/nowhere.py"), DOC.read_text())
    assert named(Path("runners/memory/units.py"), "| `memory/` | host memory: `units` (sizes) |")
