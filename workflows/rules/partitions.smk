rule partitions:
    """Split a dataset into P partitions by METIS or at random for the partitioned strategy
    (runners.partitioned.split: cached under results/partitions/ by the dataset's content hash, P and
    the method; hashed, verified, its quality in quality.json). The output names the directory.
    """
    input:
        "results/datasets/{dataset}/meta.json",
    output:
        "results/partitions/{dataset}-p{parts}-{method}.json",
    log:
        "results/logs/partitions/{dataset}-p{parts}-{method}.log",
    wildcard_constraints:
        parts=r"\d+",
        method="metis|random",
    conda:
        "../../environment.yml"
    shell:
        "python -m runners.partitioned.split prepare {wildcards.dataset} --parts {wildcards.parts}"
        " --method {wildcards.method} --data-root results/datasets --root results/partitions"
        " --marker {output} > {log} 2>&1"
