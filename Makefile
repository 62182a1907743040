# hsbx — build, test, real engines, lint.
#
#   make test      the merge gate's tests: fakes always; real docker and podman
#                  (rootful and rootless) and the cluster when set up; stress
#                  counts small; ends with where the time went
#   make soak      the same tests with the stress counts at full size
#                  (HSBX_SOAK=1: trials, 200 sessions, ten forks at once, big
#                  copies, ...), then every fuzz target: before a release, and
#                  after a change to sessions, snapshots, copies, the channel
#                  or the reaper
#   make engines   install and start real Docker Engine and Podman (root, Debian),
#                  and a docker this machine reaches only over ssh
#   make kube      build (once, cached by version) and start a real single-node
#                  Kubernetes for the kubectl runtime to come (CI runs its smoke)
#   make demo      engines if needed, then a sandbox up / exec / ls / down
#   make lint      go vet, golangci-lint (.golangci.yml: gofmt, "only internal/proc
#                  imports os/exec", errname, unparam, revive, ...), go mod tidy
#   make cross     build the CLI and the Go package for linux, darwin and windows
#                  on amd64 and arm64
#   make wine      the Windows code run under Wine (named pipes, peer checks,
#                  private directories, the detached holder)
#   make agents    rebuild the exec channel agents hsbx carries (internal/agentbin;
#                  after changing internal/agent or internal/wire: a test fails
#                  while they are stale)
#   make docs      regenerate docs/cli.md from the command model (a test
#                  fails while it is stale)
#   make fuzz      every fuzz target for FUZZTIME each (FUZZ_PICK=N: N of
#                  them, in turn by commit: what CI runs)
#   make release   archives of the CLI for linux/darwin/windows x amd64/arm64
#                  and SHA256SUMS in RELEASE_DIR (reproducible: make release-check
#                  builds twice, the second time with an empty Go build cache,
#                  and compares the bytes; CHECK_PLATFORMS narrows it, as CI
#                  does to linux/amd64)
#   make bench     hsbx vs the raw engine CLI and the seeds' reaper on the real
#                  engines (installs them if needed); writes BENCHMARKS.md

SHELL       := /bin/bash
GO          ?= go
ENGINES_DIR ?= /tmp/hsbx-engines
WINE_DIR    ?= /tmp/hsbx-wine
FUZZTIME    ?= 60s
BENCH_OUT   ?= BENCHMARKS.md
KUBE_DIR    ?= /tmp/hsbx-kube
RELEASE_DIR ?= dist
# go test's bound on one package. The sandbox package is the longest
# (about 40 minutes here with every engine and the cluster); CI's whole
# run must end within 90 minutes, and is meant to within 30 (.ci/run
# warns past 1,800 s).
TEST_TIMEOUT ?= 60m
SOAK_TIMEOUT ?= 90m
# The packages whose tests take longest, started first: go test starts
# the packages in the order they are named, two at a time here, and a
# long pole started last holds the whole run (CI's stage table and
# "test time by package" say which these are). The rest follow.
TEST_FIRST ?= ./sandbox ./internal/cli ./reaper ./cmd/hsbx . ./runtime/contract ./internal/channel
# How many parallel subtests a package runs at once (each engine of a
# test is one). The machine's 2 cores are the limit: at 4, with two
# packages side by side, the engines' own work queued behind each other
# and tests that time a command against the machine's pace failed.
TEST_PARALLEL ?= 2
# Where the tests' time summary goes (.ci/run prints it again at its end),
# and the whole go test -json stream (every test's output and times).
TEST_SUMMARY ?= /tmp/hsbx-test-summary.txt
TEST_JSON    ?= /tmp/hsbx-test.json
TESTREPORT = $(GO) run ./scripts/testreport -summary $(TEST_SUMMARY) -raw $(TEST_JSON)
# Sourced when present, so the tests reach the real engines and cluster.
ENGINES_ENV  = if [ -f $(ENGINES_DIR)/env.sh ]; then . $(ENGINES_DIR)/env.sh; fi; \
	if [ -f $(KUBE_DIR)/env.sh ]; then . $(KUBE_DIR)/env.sh; fi

.PHONY: build test soak engines kube lint tools fuzz demo bench clean cross agents release release-check wine docs

# Static and stripped: no dynamic loader at start-up (about 3 ms a call here).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -ldflags "-s -w" -o bin/hsbx ./cmd/hsbx

test: lint
	@if [ ! -f $(ENGINES_DIR)/env.sh ]; then \
	  echo "NOTE: real engines not set up ($(ENGINES_DIR)/env.sh missing): real-engine tests are SKIPPED. Run 'make engines' (root) to include them."; fi
	@if [ ! -f $(KUBE_DIR)/env.sh ]; then \
	  echo "NOTE: no Kubernetes cluster ($(KUBE_DIR)/env.sh missing): kubectl tests are SKIPPED. Run 'make kube' (root) to include them."; fi
	@$(ENGINES_ENV); set -o pipefail; $(GO) test -json -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) \
	  $(TEST_FIRST) ./... | $(TESTREPORT)

# The same tests with every stress count at full size, then every fuzz
# target for FUZZTIME. Not part of CI's gate (it takes about an hour
# here): run it before a release, and after a change to sessions,
# snapshots, copies, the channel or the reaper.
soak:
	@$(ENGINES_ENV); set -o pipefail; HSBX_SOAK=1 $(GO) test -json -count=1 -timeout $(SOAK_TIMEOUT) -parallel $(TEST_PARALLEL) \
	  $(TEST_FIRST) ./... | $(TESTREPORT)
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME)

engines:
	scripts/engines.sh $(ENGINES_DIR)

kube:
	scripts/kube.sh $(KUBE_DIR)
	scripts/kube.sh --smoke $(KUBE_DIR)

# golangci-lint, pinned; `make tools` (and so `make lint`) installs it from
# the Go module proxy into $(GOBIN_DIR) when it is missing.
GOLANGCI_VERSION = v2.6.2
GOBIN_DIR       ?= $(shell $(GO) env GOPATH)/bin
GOLANGCI         = $(GOBIN_DIR)/golangci-lint

tools:
	@if ! $(GOLANGCI) version 2>/dev/null | grep -q "$(patsubst v%,%,$(GOLANGCI_VERSION))"; then \
	  echo "installing golangci-lint $(GOLANGCI_VERSION) (go install, about 3 minutes once)"; \
	  GOBIN=$(GOBIN_DIR) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); fi

# go vet, gofmt and the linters of .golangci.yml (depguard: only
# internal/proc imports os/exec; errname, unparam, revive, errcheck,
# staticcheck, unused), and go.mod/go.sum tidy.
lint: tools
	$(GO) vet ./...
	$(GOLANGCI) run ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }

# Every target (FUZZ_PICK unset), or FUZZ_PICK of them in turn by commit.
fuzz:
	GO=$(GO) scripts/fuzz.sh $(FUZZTIME) $(FUZZ_PICK)

demo: build
	@[ -f $(ENGINES_DIR)/env.sh ] || scripts/engines.sh $(ENGINES_DIR)
	@. $(ENGINES_DIR)/env.sh; scripts/demo.sh bin/hsbx

bench: build
	@[ -f $(ENGINES_DIR)/env.sh ] || scripts/engines.sh $(ENGINES_DIR)
	@. $(ENGINES_DIR)/env.sh; kube=; if [ -f $(KUBE_DIR)/env.sh ]; then . $(KUBE_DIR)/env.sh; kube=-kube; fi; \
	  $(GO) run ./bench -hsbx bin/hsbx -out $(BENCH_OUT) $$kube $(BENCHFLAGS)
	@{ echo "## Go benchmarks (pure code, no engine)"; echo; echo '```'; \
	  $(GO) test -run '^$$' -bench . -benchmem -benchtime 200x ./runtime/enginecli ./reaper | grep -E '^(Benchmark|cpu:)'; \
	  echo '```'; } >> $(BENCH_OUT)

# The CLI and the Go package build for every OS and CPU they are meant for
# (the engines run elsewhere).
cross:
	@for p in linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do echo "build $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -o /dev/null ./cmd/hsbx || exit 1; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build . ./sandbox ./reaper ./config || exit 1; done
	@echo "vet darwin/arm64 (tests included)"; CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) vet ./...
	@echo "vet windows/amd64 (the packages with Windows code, tests included)"; \
	  CGO_ENABLED=0 GOOS=windows GOARCH=amd64 $(GO) vet ./internal/channel ./internal/privdir ./internal/proc ./runtime/detect

# hsbx's Windows code run for real under Wine (installs wine64 when missing):
# the named-pipe holder transport and peer check, private directories and
# locks, the detached holder start, doctor's channel verdict.
wine:
	scripts/wine-test.sh $(WINE_DIR)

# The agents hsbx carries for linux/amd64 and linux/arm64: reproducible
# with the Go release in internal/agentbin/toolchain.txt; commit them.
agents:
	internal/agentbin/build.sh $(GO)

# docs/cli.md from the command model (a test fails while it is stale).
docs:
	HSBX_UPDATE_DOCS=1 $(GO) test -count=1 -run '^TestCLIReferenceIsFresh$$' ./internal/cli

release:
	GO=$(GO) scripts/release.sh $(RELEASE_DIR)

# CHECK_PLATFORMS: which platforms to build twice (default: all six).
CHECK_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
release-check:
	@rm -rf /tmp/hsbx-release-a /tmp/hsbx-release-b /tmp/hsbx-release-cache
	PLATFORMS="$(CHECK_PLATFORMS)" GO=$(GO) scripts/release.sh /tmp/hsbx-release-a >/dev/null
	PLATFORMS="$(CHECK_PLATFORMS)" GOCACHE=/tmp/hsbx-release-cache GO=$(GO) scripts/release.sh /tmp/hsbx-release-b >/dev/null
	@rm -rf /tmp/hsbx-release-cache
	cmp /tmp/hsbx-release-a/SHA256SUMS /tmp/hsbx-release-b/SHA256SUMS
	@for f in /tmp/hsbx-release-a/hsbx-*; do cmp "$$f" "/tmp/hsbx-release-b/$${f##*/}" || exit 1; done
	@echo "release-check: two builds, the same bytes:"; cat /tmp/hsbx-release-a/SHA256SUMS

clean:
	rm -rf bin dist
