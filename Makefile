# The two commands a newcomer needs: `make study` runs the whole study on this machine,
# `make test` runs every check. Both set up .venv first (idempotent).
SHELL := /bin/bash
VENV := .venv/bin
CORES ?= all
# Where MNIST comes from: an offline mirror folder or URL is tried before the public mirrors.
MIRROR ?= $(wildcard ../shared/mnist)

.PHONY: setup study quick test lint
setup:
	scripts/setup

study: setup
	$(VENV)/snakemake --cores $(CORES) $(if $(MIRROR),--config mirrors='["$(abspath $(MIRROR))"]')

quick: setup
	$(VENV)/snakemake --cores $(CORES) --configfile config/quick.yaml $(if $(MIRROR),--config mirrors='["$(abspath $(MIRROR))"]')

lint: setup
	scripts/lint

test: setup
	scripts/test
