"""How many repeats: the launch noise pooled over configurations and the two repeat planners built on it."""
