# The two commands of the README: `make report` (default sweep + HTML report) and `make test`.
# Both set up the pinned environment first; that step does nothing when it is already current.
VENV ?= .venv
PY := $(VENV)/bin/python
# Jobs and tools started by snakemake/pytest find the venv first.
export PATH := $(abspath $(VENV))/bin:$(PATH)
CORES ?= all

.PHONY: setup report test doctor gpu-check lock browser slurm clean-results

setup:
	@VENV=$(VENV) scripts/setup.sh

# Headless Chromium for the report's browser check (Debian package; skipped where apt is absent).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "browser: could not install chromium; the browser check will be skipped"; \
	  else echo "browser: chromium not installed; the browser check will be skipped"; fi; }

# SLURM and munge for tests/test_slurm.py, which starts a private one-node cluster (Debian
# packages, about 46 MB; nothing is started here). Skipped where apt or root is absent.
slurm:
	@{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ]; } || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null) \
	      || echo "slurm: could not install slurm-wlm and munge; the SLURM tests will be skipped"; \
	  else echo "slurm: slurm-wlm not installed; the SLURM tests will be skipped"; fi; }

report: setup
	$(VENV)/bin/snakemake --cores $(CORES) --profile profiles/default
	@echo "report: $(CURDIR)/results/report/index.html"

test: setup browser slurm
	$(PY) -m pytest -q tests

doctor: setup
	$(PY) -m runners.doctor

# On a machine with NVIDIA GPUs: doctor, short NCCL runs of every framework x model at 1 and 2
# GPUs, their report, and the `gpu` tests; prints one table. Fails loudly without a GPU.
gpu-check: setup
	$(PY) -m runners.gpu_check

# Regenerate the lock from the current environment (after deliberately changing a version).
lock:
	$(PY) -m pip freeze --all --exclude pip --exclude-editable | sort -f > requirements/lock.txt
	$(PY) -m pip --version | awk '{print "pip==" $$2}' >> requirements/lock.txt

clean-results:
	rm -rf results .snakemake
