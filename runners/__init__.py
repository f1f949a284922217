"""gnnscale runners: datasets, the training harness and the framework adapters."""
