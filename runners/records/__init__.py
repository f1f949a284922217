"""What a run leaves behind: result.json, the per-rank rows, the run directory and its history."""
