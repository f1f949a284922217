"""The partitioned strategy: the graph split into partitions and this host's graph server."""
