# Everything a developer runs: `make run` serves the function on :8080 (the image's
# target, on functions-framework's ASGI server),
# `make test` installs what the tests need and runs all of them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8080

.PHONY: run test lint generate unit helm terraform e2e e2e-newest e2e-oldest system-packages bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

run: $(VENV)/.installed
	$(BIN)/functions-framework --target=mutate_asgi --source=main.py --port=$(PORT)

test: lint unit terraform e2e

lint: $(VENV)/.installed
	$(BIN)/ruff check --quiet .
	$(BIN)/ruff format --check --quiet .
	@$(BIN)/lint-imports --no-cache --no-logo >$(VENV)/lint-imports.out || \
	  { cat $(VENV)/lint-imports.out; exit 1; }
	@$(BIN)/mypy >$(VENV)/mypy.out || { cat $(VENV)/mypy.out; exit 1; }
	@echo "lint: ruff check, ruff format and the import contract found nothing; mypy: $$(tail -n 1 $(VENV)/mypy.out)"

# The files written from the settings table (castslice/settings/table.py): the chart's
# values.schema.json, values.yaml's defaults, templates/_settings.tpl and
# docs/configuration.md's table. A test fails while one is stale.
generate: $(VENV)/.installed
	$(BIN)/python -m castslice.render.chart_and_docs

unit: $(VENV)/.installed helm
	$(BIN)/pytest -q --no-header -p no:cacheprovider -m "not terraform" tests --ignore=tests/e2e

# The helm CLI the chart tests run, built from its Go module once per version into
# ~/.cache/castslice/ (tests/helm/build.sh). Without Go the chart tests skip, except
# under CI=true, where they fail.
helm: $(VENV)/.installed
	@if command -v go >/dev/null; then \
	  bash tests/helm/build.sh >/dev/null 2>$(VENV)/helm-build.log || { cat $(VENV)/helm-build.log; exit 1; }; \
	  echo "helm: $$(cat tests/helm/helm.version) ready"; \
	else \
	  echo "helm: Go not found, so the chart tests cannot build helm (https://go.dev/dl/)"; \
	fi

# Terraform's own evaluation of infra/ (variables, validations, locals; offline,
# no providers). The HCL is always checked by parsing in `unit`; this adds
# Terraform itself where it is installed. Under CI=true a missing terraform fails,
# as other missing tools do there.
terraform: $(VENV)/.installed
	@if command -v terraform >/dev/null; then \
	  $(BIN)/pytest -q --no-header -p no:cacheprovider -m terraform tests/deploy; \
	elif [ "$$CI" = true ] || [ "$$CI" = 1 ]; then \
	  echo "terraform: CI=true and terraform (1.9+) is not installed: https://developer.hashicorp.com/terraform/install" >&2; \
	  exit 1; \
	else \
	  echo "terraform: not installed, so infra/ was checked by parsing only (see unit)"; \
	fi

# The suite runs against the newest and the oldest supported Kubernetes release
# (tests/e2e/kube/go.mod and tests/e2e/kube/oldest/go.mod); tests of features the
# oldest lacks are deselected there.
e2e: e2e-newest e2e-oldest

e2e-newest: $(VENV)/.installed system-packages
	CASTSLICE_E2E_KUBERNETES=newest $(BIN)/pytest -q --no-header -p no:cacheprovider tests/e2e

e2e-oldest: $(VENV)/.installed system-packages
	CASTSLICE_E2E_KUBERNETES=oldest $(BIN)/pytest -q --no-header -p no:cacheprovider tests/e2e

# nginx terminates TLS in front of the function in the end-to-end suite, as
# Cloud Run's front end does; Go builds the Kubernetes control plane.
system-packages:
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || { \
	  echo "installing nginx-light (needs root)"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx-light >/dev/null; }
	@command -v go >/dev/null || { echo "Go 1.26+ is required to build the control plane: https://go.dev/dl/"; exit 1; }

# Not part of `make test`: figures depend on the machine (see bench/README.md).
bench: $(VENV)/.installed
	@command -v wrk >/dev/null || { \
	  echo "installing wrk (needs root)"; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends wrk >/dev/null; }
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
