"""Memory sizes as text: `--memory-limit`'s parser and the formatter every report line uses."""

from __future__ import annotations

import re


class MemoryLimitError(ValueError):
    """A bad --memory-limit value, or a machine where a memory cap cannot be enforced."""


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.I)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

MIN_LIMIT_BYTES = 64 * 2**20  # below this not even one rank importing torch starts


def parse_size(text) -> int:
    """'2G' / '512M' / '1.5GiB' / '1048576' -> bytes (binary units); raises MemoryLimitError."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise MemoryLimitError(
            f"--memory-limit {text!r}: expected a size such as 512M, 2G or 1.5G (units K, M, G, T "
            "in powers of 1024; a plain number is bytes)")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value < MIN_LIMIT_BYTES:
        raise MemoryLimitError(f"--memory-limit {text!r} is {value} bytes; the smallest allowed cap is "
                               f"{MIN_LIMIT_BYTES // 2**20}M (one rank importing torch alone needs more)")
    return value


def fmt_bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"

