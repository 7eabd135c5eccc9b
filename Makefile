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
# Charts the Cozystack packages wrap: packages/system/<name>/charts/<name> is a copy of charts/<name>.
PACKAGED    := address-controller metallb-iad
GENERATED   := address-controller/api address-controller/config metallb-iad/internal/metallb metallb-iad/config \
               charts/address-controller/files charts/metallb-iad/files

# images.yaml is the one source of truth for the shipped image references; these derive from it.
IMAGES_DERIVED := images.yaml packages charts README.md docs

export GOFLAGS := -buildvcs=false
export E2E_PROVIDER
# The MetalLB controller every target builds and runs: empty means the version Cozystack ships,
# tools/binaries' DefaultMetalLBVersion; another pinned one (tools/binaries/metallb/<version>)
# with METALLB_VERSION=v0.15.2.
export METALLB_VERSION

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

.PHONY: binaries
binaries: ## Build (or reuse) etcd, kube-apiserver, kube-controller-manager, kubectl, MetalLB (METALLB_VERSION), controller-gen, golangci-lint and the distribution registry.
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
	cp address-controller/config/crd/*.yaml charts/address-controller/files/crds/
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

.PHONY: vendor-charts
vendor-charts: ## Copy charts/<name> into packages/system/<name>/charts/ (Cozystack builds packages from packages/ alone).
	@for c in $(PACKAGED); do \
		rm -rf "packages/system/$$c/charts"; mkdir -p "packages/system/$$c/charts"; \
		cp -R "charts/$$c" "packages/system/$$c/charts/$$c"; \
	done

.PHONY: check-vendored
check-vendored: vendor-charts ## Fail when a wrapper's vendored chart differs from charts/.
	@if [ -n "$$(git status --porcelain -- $(foreach c,$(PACKAGED),packages/system/$(c)/charts))" ]; then \
		echo "vendored charts are stale; run 'make vendor-charts' and commit the result:"; \
		git status --porcelain -- $(foreach c,$(PACKAGED),packages/system/$(c)/charts); \
		exit 1; \
	fi

.PHONY: chart-docs
chart-docs: ## Regenerate the value tables of the chart READMEs from the '# --' comments in values.yaml.
	$(GO) run ./tools/cmd/chartdocs $(addprefix charts/,$(PACKAGED))

.PHONY: check-chart-docs
check-chart-docs: chart-docs ## Fail when a chart README's value table is stale.
	@if [ -n "$$(git status --porcelain -- $(foreach c,$(PACKAGED),charts/$(c)/README.md))" ]; then \
		echo "chart READMEs are stale; run 'make chart-docs' and commit the result:"; \
		git --no-pager diff -- $(foreach c,$(PACKAGED),charts/$(c)/README.md); \
		exit 1; \
	fi

.PHONY: build
build: ## Build the controllers and tools into ./bin.
	@mkdir -p $(LOCALBIN)
	$(GO) build -o $(LOCALBIN)/ $(wildcard ./address-controller/cmd/*) $(wildcard ./metallb-iad/cmd/*) $(wildcard ./tools/cmd/*)

.PHONY: images
images: ## The reference build: both images, each with an SPDX SBOM referrer per platform, into an OCI layout (IMAGES_DIR, default ./bin/images).
	$(GO) run ./tools/cmd/images build -layout $(or $(IMAGES_DIR),$(LOCALBIN)/images) $(if $(VERSION),-version $(VERSION))

.PHONY: release
release: ## Build and push both images with their SBOMs to REGISTRY, then write the digests to images.yaml and every place derived from it.
	@test -n "$(REGISTRY)" || { echo "usage: make release REGISTRY=ghcr.io/cozystack VERSION=v0.1.0 [SBOM_DIR=dir]"; exit 2; }
	$(GO) run ./tools/cmd/images build -push $(REGISTRY) $(if $(VERSION),-version $(VERSION)) $(if $(SBOM_DIR),-sbom-dir $(SBOM_DIR)) -update
	@git --no-pager diff --stat

.PHONY: release-commit
release-commit: ## After make release: check every derived place, commit the new digests and tag that commit VERSION.
	@test -n "$(VERSION)" || { echo "usage: make release-commit VERSION=v0.1.0"; exit 2; }
	$(GO) run ./tools/cmd/images check
	git add -A -- $(IMAGES_DERIVED)
	git commit -q -m "Release $(VERSION): packages, charts and docs name the pushed image digests"
	git tag -a "$(VERSION)" -m "$(VERSION)"
	@echo "tagged $(VERSION) at $$(git rev-parse --short HEAD)"

.PHONY: sync-images
sync-images: ## Derive every place that names a shipped image (packages, charts, READMEs, docs) from images.yaml.
	$(GO) run ./tools/cmd/images sync

.PHONY: check-images
check-images: ## Fail when a place that names a shipped image differs from images.yaml.
	$(GO) run ./tools/cmd/images check

.PHONY: lint
lint: ## gofmt, go vet and golangci-lint (pinned, .golangci.yml) over every module.
	@out="$$(gofmt -l $(MODULES) | grep -v '/vendor/' || true)"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(addprefix ./,$(addsuffix /...,$(MODULES)))
	@$(BINARIES) build golangci-lint >/dev/null
	@lint="$$($(BINARIES) path golangci-lint)"; status=0; \
	for m in $(MODULES); do \
		echo "golangci-lint $$m"; \
		(cd $$m && "$$lint" run --allow-parallel-runners --config $(CURDIR)/.golangci.yml ./...) || status=1; \
	done; exit $$status

.PHONY: test
test: lint check-generated check-chart-docs check-vendored check-images binaries test-unit test-fuzz test-e2e test-bench-e2e ## Everything CI runs.

.PHONY: test-unit
test-unit: ## Unit and integration (envtest) tests of every module but e2e.
	KUBEBUILDER_ASSETS="$$($(BINARIES) envtest)" METALLB_CRDS="$$($(BINARIES) dir metallb)/crds" $(GO) test $(TEST_FLAGS) -count=1 -timeout 30m \
		./address-controller/... ./metallb-iad/... ./tools/...

# Each fuzz target, for FUZZTIME (default 20000x executions): the seed corpora also run as plain tests in test-unit.
# The default is a count, not a duration: on Go 1.26 a duration races the fuzz coordinator's own deadline and
# can fail a target with a bare "context deadline exceeded" and no failing input (golang/go#75804, fixed in 1.27).
FUZZ_TARGETS := FuzzParseAndName:./address-controller/api/v1alpha1/ FuzzAddressNameInjective:./address-controller/api/v1alpha1/ \
                FuzzAutoClaimSkip:./address-controller/internal/controller/ FuzzLinkedClaim:./metallb-iad/internal/driver/ \
                FuzzServicePinsPolicy:./tools/policycel/ FuzzParkingPolicies:./tools/policycel/ \
                FuzzPlanProvision:./metallb-iad/internal/driver/ FuzzPlanAddress:./metallb-iad/internal/driver/ \
                FuzzPlanAttach:./metallb-iad/internal/driver/ \
                FuzzDecideClaim:./address-controller/internal/controller/ FuzzDecideAddress:./address-controller/internal/controller/

.PHONY: test-fuzz
test-fuzz: ## Go native fuzzing of address naming, the skip and link rules, the service-pins and parking policies' CEL, the driver's planners and the core's decisions (FUZZTIME each, default 20000x).
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzzing $${t%%:*} for $(or $(FUZZTIME),20000x)"; \
		$(GO) test -count=1 -run '^$$' -fuzz "^$${t%%:*}$$" -fuzztime $(or $(FUZZTIME),20000x) "$${t#*:}" || exit 1; \
	done

.PHONY: bench
bench: ## Benchmarks, reported as ratios to a baseline measured in the same run (BENCHTIME, default 3x).
	KUBEBUILDER_ASSETS="$$($(BINARIES) envtest)" $(GO) test -count=1 -run '^$$' -bench . -benchtime $(or $(BENCHTIME),3x) \
		./address-controller/internal/controller/

.PHONY: bench-e2e
bench-e2e: binaries ## Scale benchmark against plain MetalLB (N, default 1000; BENCH_OUT, default ./bin/bench-e2e.json, plot beside it).
	@mkdir -p $(LOCALBIN)
	$(GO) run ./e2e/cmd/bench-e2e -n $(or $(N),1000) -out $(or $(BENCH_OUT),$(LOCALBIN)/bench-e2e.json) $(BENCH_FLAGS)

.PHONY: test-bench-e2e
test-bench-e2e: ## bench-e2e once at n=50, as a smoke test (fails on a timeout, a wrong address or a missing apiserver profile).
	@mkdir -p $(LOCALBIN)
	rm -rf $(LOCALBIN)/bench-e2e-smoke-profiles
	$(GO) run ./e2e/cmd/bench-e2e -n 50 -progress 10s -out $(LOCALBIN)/bench-e2e-smoke.json \
		-apiserver-profile $(LOCALBIN)/bench-e2e-smoke-profiles -apiserver-profile-seconds 1
	test -s $(LOCALBIN)/bench-e2e-smoke-profiles/apiserver-claims.pprof

.PHONY: test-e2e
# The suite's short chaos run uses a fixed seed (CHAOS_SEED overrides it), so that a red run is
# replayed exactly; `make chaos` draws a new seed each time.
CHAOS_SEED_TEST ?= 431099936

# The local control plane's directory (its processes' logs under logs/, the audit log) is kept
# after the run, so that a red run can be read; the next run starts it afresh.
E2E_STATE ?= $(LOCALBIN)/e2e-state

test-e2e: ## The end-to-end suite on a local control plane with MetalLB (E2E_PROVIDER=local; chaos seed CHAOS_SEED_TEST; logs kept in E2E_STATE).
	rm -rf $(E2E_STATE)
	cd e2e && E2E_STATE_DIR=$(E2E_STATE) CHAOS_SEED=$(or $(CHAOS_SEED),$(CHAOS_SEED_TEST)) $(GO) test $(TEST_FLAGS) -count=1 -timeout 40m -v ./...

.PHONY: chaos
chaos: ## The seeded chaos test alone: CHAOS_OPS (default 1000), CHAOS_SEED, CHAOS_FAULT_RATE; keeps the state dir on failure; CHAOS_REPORT=file appends the run's row for docs/reliability.md.
	cd e2e && CHAOS_OPS=$(or $(CHAOS_OPS),1000) CHAOS_SEED=$(CHAOS_SEED) CHAOS_FAULT_RATE=$(CHAOS_FAULT_RATE) \
		CHAOS_REPORT=$(if $(CHAOS_REPORT),$(abspath $(CHAOS_REPORT))) \
		$(GO) test -count=1 -timeout 120m -run '^TestChaos$$' -v . ./chaos

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

.PHONY: sandbox-status
sandbox-status: ## Each component of the detached sandbox in SANDBOX_DIR: pid, state, readiness, restarts, last exit.
	@if [ -x $(LOCALBIN)/sandbox ]; then $(LOCALBIN)/sandbox status -dir $(SANDBOX_DIR); \
	else $(GO) run ./tools/cmd/sandbox status -dir $(SANDBOX_DIR); fi
