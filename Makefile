# The two commands of the README: `make report` (default sweep + HTML report) and `make test`.
# Both set up the lanes first (scripts/setup.sh); that step does nothing when they are current.
# A lane is a software stack: `pair` (torch 2.2.1, DGL and PyG; .venv, which also runs Snakemake,
# the analysis and the tests), `current` (the newest torch PyG tests, PyG only; .venv-current) and
# `own` (the Python named by PYTHON=..., reusing its torch; .venv-own).
VENV ?= .venv
PY := $(VENV)/bin/python
LANE ?= pair
LANE_VENV := $(if $(filter pair,$(LANE)),$(VENV),.venv-$(LANE))
# Jobs and tools started by snakemake/pytest find the venv first.
export PATH := $(abspath $(VENV))/bin:$(PATH)
CORES ?= all

.PHONY: setup lanes report test test-fast doctor gpu-check lock browser slurm clean-results

# One lane: `make setup` (pair), `make setup LANE=current`, `make setup LANE=own PYTHON=python3`.
setup:
	@LANE=$(LANE) VENV=$(LANE_VENV) scripts/setup.sh

# The lanes the default sweep and the tests use.
lanes:
	@LANE=pair VENV=$(VENV) scripts/setup.sh
	@LANE=current VENV=.venv-current scripts/setup.sh

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

# Lanes beside the pair for `make report`, opt-in: `make report LANES=current` (comma-separated).
LANES ?=
comma := ,
empty :=
space := $(empty) $(empty)
report_lanes := $(strip $(subst $(comma), ,$(LANES)))

report:
	@LANE=pair VENV=$(VENV) scripts/setup.sh
	@for lane in $(report_lanes); do LANE=$$lane VENV=.venv-$$lane scripts/setup.sh || exit 1; done
	$(VENV)/bin/snakemake --cores $(CORES) --profile profiles/default \
	  $(if $(report_lanes),--config 'lanes={compare: [$(subst $(space),$(comma)$(space),$(report_lanes))]}')
	@echo "report: $(CURDIR)/results/report/index.html"

test: lanes browser slurm
	$(PY) -m pytest -q --durations=15 tests

# The fast loop while changing code: the unit tests only (tests/conftest.py says which), about
# 40 s on 2 cores. `make test` runs every kind; CI runs `make test`.
test-fast:
	@LANE=pair VENV=$(VENV) scripts/setup.sh
	$(PY) -m pytest -q -m unit tests

doctor: setup
	$(LANE_VENV)/bin/python -m runners.checks.doctor

# On a machine with NVIDIA GPUs: doctor, short NCCL runs of every framework x model at 1 and 2
# GPUs, their report, and the `gpu` tests; prints one table. Fails loudly without a GPU.
gpu-check: setup
	$(LANE_VENV)/bin/python -m runners.checks.gpu_check --analysis-python $(PY)

# Regenerate a lane's lock from its environment (after deliberately changing a version).
lock:
	@[ "$(LANE)" != own ] || { echo "lock: the own lane has no lock (it keeps what its Python has)" >&2; exit 2; }
	$(LANE_VENV)/bin/python -m pip freeze --all --exclude pip --exclude-editable | sort -f > requirements/$(LANE)/lock.txt
	$(LANE_VENV)/bin/python -m pip --version | awk '{print "pip==" $$2}' >> requirements/$(LANE)/lock.txt

clean-results:
	rm -rf results .snakemake
