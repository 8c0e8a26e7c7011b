# The two commands (README): `make render` runs the main job on the dev stack; `make test` runs
# every test. Both do all set-up first.
VENV := .venv
BIN := $(VENV)/bin
STACK ?= dev
# A file of at least 32 secret bytes seeding the rendered keys (make render STACK=prod SEED=FILE).
SEED ?=
# Stack values overridden for this render, as `pulumi config set --path` would set them:
# make render SET="installer.source=prefix installer.prefix=/opt/flux"
SET ?=

.PHONY: setup render deploy test test-fast fuzz bench bench-full lint image e2e clean
setup:
	@bash scripts/setup

render: setup
	$(BIN)/fluxinfra render --stack $(STACK) --out build/manifests $(if $(SEED),--seed-file $(SEED)) \
	  $(foreach s,$(SET),--set '$(s)')

# The render applied to the cluster kubectl points at (CRDs first, then `kubectl apply -k`).
deploy: render
	bash scripts/deploy build/manifests

test: setup
	@bash scripts/test

# The quick path while working: unit + render + conformance, tests marked slow left out (about a
# minute of CPU; no lab, no image build, no live resource-query replay).
test-fast: setup
	@bash scripts/test -m "not slow" tests/unit tests/render tests/conformance

# The fuzz tests (tests/fuzz: every input surface, hypothesis) for FLUXINFRA_FUZZ_SECONDS each
# (`make test` gives each 3); prints the inputs tried and the failures per surface. An input
# found is printed, shrunk: keep it as an @example of its test.
FLUXINFRA_FUZZ_SECONDS ?= 60
fuzz: setup
	FLUXINFRA_FUZZ_SECONDS=$(FLUXINFRA_FUZZ_SECONDS) $(BIN)/python -m pytest tests/fuzz -q \
	  -o faulthandler_timeout=600 $(PYTEST_ARGS)

# Every benchmark at small sizes (a few minutes); bench-full: the sizes the README's figures use.
bench: setup
	$(BIN)/python benchmarks/run.py --quick

bench-full: setup
	$(BIN)/python benchmarks/run.py

# The scheduler/service image (root, podman): local Debian base, host-built wheels, offline build.
# Tagged as the dev stack expects (fluxinfra:<version>); see docs/image.md.
IMAGE_ENV := CONTAINERS_CONF=$(CURDIR)/tests/image/containers.conf
# Another name for the image (the e2e suite builds under a name of its own, so concurrent builds
# in other worktrees cannot retag what it is about to load).
IMAGE_TAG ?= localhost/fluxinfra:$$($(BIN)/python -c 'import fluxinfra; print(fluxinfra.__version__)')
# fluxinfra's wheel is built plain Python (FLUXINFRA_BUILD_PURE=1): the image's matcher runs as it
# always has, uncompiled (docs/image.md).
image: setup
	$(IMAGE_ENV) scripts/base-image
	rm -rf build/lib build/wheels
	FLUXINFRA_BUILD_PURE=1 $(BIN)/pip wheel -q -w build/wheels '.[scheduler]'
	$(IMAGE_ENV) podman build --network=none --ulimit nofile=16384:16384 --ulimit nproc=8192:8192 \
	  --build-arg VERSION=$$($(BIN)/python -c 'import fluxinfra; print(fluxinfra.__version__)') \
	  --build-arg REVISION=$$(git rev-parse HEAD) --build-arg CREATED=$$(date -u +%FT%TZ) \
	  -t $(IMAGE_TAG) .

# The e2e suite against a real API server and kubelet (tests/e2e, docs/e2e.md): starts a bed from
# the Kubernetes binaries in $$FLUXINFRA_KUBE_BIN or on PATH (root), or uses the cluster named by
# $$FLUXINFRA_E2E_KUBECONFIG; fails, rather than skips, when neither is there.
e2e: setup
	scripts/kube deps
	FLUXINFRA_E2E_REQUIRED=1 FLUXINFRA_E2E_NODES=$${FLUXINFRA_E2E_NODES:-4} \
	  $(BIN)/python -m pytest tests/e2e $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check setup.py fluxinfra tests benchmarks __main__.py roles/flux_broker/filter_plugins scripts/lab scripts/kubebed

clean:
	rm -rf build .pytest_cache
