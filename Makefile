# The two commands (README): `make render` runs the main job on the dev stack; `make test` runs
# every test. Both do all set-up first.
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev

.PHONY: setup render test bench lint clean
setup:
	@bash scripts/setup

render: setup
	$(BIN)/fluxinfra render --stack $(STACK) --out build/manifests

test: setup
	@bash scripts/test

bench: setup
	$(BIN)/python benchmarks/run.py

lint: setup
	$(BIN)/ruff check fluxinfra tests benchmarks __main__.py

clean:
	rm -rf build .pytest_cache
