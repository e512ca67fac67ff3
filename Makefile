# The two commands a newcomer needs: `make study` runs the whole study on this machine,
# `make test` runs every check. Both set up .venv first (idempotent).
SHELL := /bin/bash
VENV := .venv/bin
CORES ?= all
# Where MNIST comes from: an offline mirror folder or URL is tried before the public mirrors.
MIRROR ?= $(wildcard ../shared/mnist)

.PHONY: setup study quick test lint publish
setup:
	scripts/setup
	scripts/setup-system

study: setup
	$(VENV)/snakemake --cores $(CORES) $(if $(MIRROR),--config mirrors='["$(abspath $(MIRROR))"]')

quick: setup
	$(VENV)/snakemake --cores $(CORES) --configfile config/quick.yaml $(if $(MIRROR),--config mirrors='["$(abspath $(MIRROR))"]')

# The published study: the results (this machine's and those merged in with `mnistbench
# unpack`) into report/ with a manifest, refused while cells are missing, failed or stale
# (docs/publish.md). PUBLISH_FLAGS: e.g. --configfile config/quick.yaml, or
# --allow-stale --reason "why".
publish: setup
	$(VENV)/mnistbench publish $(PUBLISH_FLAGS)

lint: setup
	scripts/lint

test:
	scripts/test
