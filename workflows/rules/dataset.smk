rule dataset:
    """Write the canonical on-disk graph that every run reads (idempotent). The suite's own
    datasets only: an imported one (runners.datasets import) or a twin (runners.datasets twin)
    is the user's, so no rule makes it, and Snakemake neither removes nor rewrites it (even with --forceall).
    """
    output:
        "results/datasets/{dataset}/meta.json",
    log:
        "results/logs/dataset/{dataset}.log",
    wildcard_constraints:
        dataset=registry.wildcard_pattern(datasets.DATASET_NAMES),
    conda:
        "../../environment.yml"
    params:
        source=dataset_source,
    shell:
        "python -m runners.datasets prepare {wildcards.dataset}"
        " --root results/datasets {params.source} > {log} 2>&1"
