rule dataset:
    """Write the canonical on-disk graph that every run reads (idempotent)."""
    output:
        "results/datasets/{dataset}/meta.json",
    log:
        "results/logs/dataset/{dataset}.log",
    conda:
        "../../environment.yml"
    params:
        source=dataset_source,
    shell:
        "python -m runners.datasets prepare {wildcards.dataset}"
        " --root results/datasets {params.source} > {log} 2>&1"
