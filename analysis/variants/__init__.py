"""Variants beside the main pair: other torch lanes, other loaders and partitioned training, paired per point."""
