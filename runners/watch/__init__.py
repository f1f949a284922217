"""Watching a launched run and explaining its end: supervisor, evidence, stacks, nodes, the rulebook."""
