# The project's commands. The only prerequisite is Go 1.26; everything else is built from pinned
# Go modules into a cache outside the checkout ($XDG_CACHE_HOME or ~/.cache, reserved-ips/bin).

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

MODULES     := address-controller metallb-iad tools e2e
LOCALBIN    := $(CURDIR)/bin
SANDBOX_DIR ?= $(CURDIR)/.sandbox
GO          ?= go
BINARIES    := $(GO) run ./tools/cmd/binaries
TEST_FLAGS  ?=
GENERATED   := address-controller/api address-controller/config metallb-iad/internal/metallb metallb-iad/config \
               charts/address-controller/crds charts/address-controller/files charts/metallb-iad/files

export GOFLAGS := -buildvcs=false
export E2E_PROVIDER

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: binaries
binaries: ## Build (or reuse) etcd, kube-apiserver, kube-controller-manager, kubectl, MetalLB and controller-gen.
	$(BINARIES) build

.PHONY: generate
generate: ## Regenerate deepcopy code, CRDs and RBAC with controller-gen.
	@$(BINARIES) build controller-gen >/dev/null
	cd address-controller && "$$(cd .. && $(BINARIES) path controller-gen)" \
		object:headerFile=hack/boilerplate.go.txt paths=./api/... \
		crd:generateEmbeddedObjectMeta=false output:crd:artifacts:config=config/crd \
		rbac:roleName=address-controller output:rbac:artifacts:config=config/rbac paths=./...
	cd metallb-iad && "$$(cd .. && $(BINARIES) path controller-gen)" \
		object:headerFile=../address-controller/hack/boilerplate.go.txt paths=./internal/metallb/... \
		rbac:roleName=metallb-iad output:rbac:artifacts:config=config/rbac paths=./...
	cp address-controller/config/crd/*.yaml charts/address-controller/crds/
	cp address-controller/config/rbac/role.yaml charts/address-controller/files/role.yaml
	cp metallb-iad/config/rbac/role.yaml charts/metallb-iad/files/role.yaml

.PHONY: check-generated
check-generated: generate ## Fail when the committed generated files are stale.
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files are stale; run 'make generate' and commit the result:"; \
		git status --porcelain -- $(GENERATED); \
		git --no-pager diff --stat -- $(GENERATED); \
		exit 1; \
	fi

.PHONY: build
build: ## Build the controllers and tools into ./bin.
	@mkdir -p $(LOCALBIN)
	$(GO) build -o $(LOCALBIN)/ $(wildcard ./address-controller/cmd/*) $(wildcard ./metallb-iad/cmd/*) $(wildcard ./tools/cmd/*)

.PHONY: images
images: ## Build both images without Docker into an OCI layout (IMAGES_DIR, default ./bin/images).
	$(GO) run ./tools/cmd/images build -layout $(or $(IMAGES_DIR),$(LOCALBIN)/images)

.PHONY: release
release: ## Build and push both images to REGISTRY (e.g. ghcr.io/cozystack), then point packages/ at their digests.
	@test -n "$(REGISTRY)" || { echo "usage: make release REGISTRY=ghcr.io/cozystack [VERSION=v0.1.0]"; exit 2; }
	$(GO) run ./tools/cmd/images build -push $(REGISTRY) $(if $(VERSION),-version $(VERSION)) -update-packages
	@git --no-pager diff --stat -- packages/

.PHONY: lint
lint: ## gofmt and go vet over every module.
	@out="$$(gofmt -l $(MODULES) | grep -v '/vendor/' || true)"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(addprefix ./,$(addsuffix /...,$(MODULES)))

.PHONY: test
test: lint check-generated binaries test-unit test-e2e test-bench-e2e ## Everything CI runs.

.PHONY: test-unit
test-unit: ## Unit and integration (envtest) tests of every module but e2e.
	KUBEBUILDER_ASSETS="$$($(BINARIES) envtest)" METALLB_CRDS="$$($(BINARIES) dir metallb)/crds" $(GO) test $(TEST_FLAGS) -count=1 -timeout 30m \
		./address-controller/... ./metallb-iad/... ./tools/...

.PHONY: bench
bench: ## Benchmarks, reported as ratios to a baseline measured in the same run (BENCHTIME, default 3x).
	KUBEBUILDER_ASSETS="$$($(BINARIES) envtest)" $(GO) test -count=1 -run '^$$' -bench . -benchtime $(or $(BENCHTIME),3x) \
		./address-controller/internal/controller/

.PHONY: bench-e2e
bench-e2e: binaries ## Scale benchmark against plain MetalLB (N, default 1000; BENCH_OUT, default ./bin/bench-e2e.json, plot beside it).
	@mkdir -p $(LOCALBIN)
	$(GO) run ./e2e/cmd/bench-e2e -n $(or $(N),1000) -out $(or $(BENCH_OUT),$(LOCALBIN)/bench-e2e.json) $(BENCH_FLAGS)

.PHONY: test-bench-e2e
test-bench-e2e: ## bench-e2e once at n=50, as a smoke test (fails on a timeout or a wrong address).
	@mkdir -p $(LOCALBIN)
	$(GO) run ./e2e/cmd/bench-e2e -n 50 -progress 10s -out $(LOCALBIN)/bench-e2e-smoke.json

.PHONY: test-e2e
test-e2e: ## The end-to-end suite on a local control plane with MetalLB (E2E_PROVIDER=local).
	cd e2e && $(GO) test $(TEST_FLAGS) -count=1 -timeout 40m -v ./...

.PHONY: sandbox
sandbox: build binaries ## Run the sandbox in the foreground until Ctrl-C.
	$(LOCALBIN)/sandbox run

.PHONY: sandbox-up
sandbox-up: build binaries ## Start the sandbox detached (SANDBOX_DIR, default ./.sandbox); kubeconfig at SANDBOX_DIR/kubeconfig.
	$(LOCALBIN)/sandbox up -dir $(SANDBOX_DIR)

.PHONY: sandbox-down
sandbox-down: ## Stop the detached sandbox in SANDBOX_DIR.
	@if [ -x $(LOCALBIN)/sandbox ]; then $(LOCALBIN)/sandbox down -dir $(SANDBOX_DIR); \
	else $(GO) run ./tools/cmd/sandbox down -dir $(SANDBOX_DIR); fi
