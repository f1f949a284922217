"""Host memory of one run, one job per module (nothing is re-exported here, so importing one
of them never imports the others):

- `units`: sizes as text and bytes (--memory-limit's parser, the formatter);
- `model`: the pre-flight model of the run's peak host memory;
- `peak`: the measured peak, from the ranks' cpu.csv;
- `cgroup`: the memory cgroup that caps a run, and the kernel's OOM kills.
"""
