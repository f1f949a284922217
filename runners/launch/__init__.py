"""Starting one run: pre-flight, the strategy, the ranks' launch and what it needs on the way."""
