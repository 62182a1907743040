# hsbx — build, test, real engines, lint.
#
#   make test      all tests: fakes always; real docker and podman (rootful and
#                  rootless) too when `make engines` has set them up
#   make engines   install and start real Docker Engine and Podman (root, Debian)
#   make demo      engines if needed, then a sandbox up / exec / ls / down
#   make lint      go vet, gofmt, and "only internal/proc imports os/exec"
#   make fuzz      every fuzz target for FUZZTIME each
#   make bench     hsbx vs the raw engine CLI and the seeds' reaper on the real
#                  engines (installs them if needed); writes BENCHMARKS.md

GO          ?= go
ENGINES_DIR ?= /tmp/hsbx-engines
FUZZTIME    ?= 60s
BENCH_OUT   ?= BENCHMARKS.md
# Sourced when present, so the tests reach the real engines.
ENGINES_ENV  = if [ -f $(ENGINES_DIR)/env.sh ]; then . $(ENGINES_DIR)/env.sh; fi

.PHONY: build test engines lint fuzz demo bench clean

# Static and stripped: no dynamic loader at start-up (about 3 ms a call here).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/hsbx ./cmd/hsbx

test: lint
	@if [ ! -f $(ENGINES_DIR)/env.sh ]; then \
	  echo "NOTE: real engines not set up ($(ENGINES_DIR)/env.sh missing): real-engine tests are SKIPPED. Run 'make engines' (root) to include them."; fi
	@$(ENGINES_ENV); $(GO) test -count=1 ./...

engines:
	scripts/engines.sh $(ENGINES_DIR)

lint:
	$(GO) vet ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod/go.sum are not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@bad=$$($(GO) list -f '{{.ImportPath}}: {{join .Imports " "}}' ./... | grep -w 'os/exec' | grep -v '^github.com/hsbx/hsbx/internal/proc:'); \
	  if [ -n "$$bad" ]; then echo "only internal/proc may import os/exec:"; echo "$$bad" | cut -d: -f1; exit 1; fi

fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

demo: build
	@[ -f $(ENGINES_DIR)/env.sh ] || scripts/engines.sh $(ENGINES_DIR)
	@. $(ENGINES_DIR)/env.sh; scripts/demo.sh bin/hsbx

bench: build
	@[ -f $(ENGINES_DIR)/env.sh ] || scripts/engines.sh $(ENGINES_DIR)
	@. $(ENGINES_DIR)/env.sh; $(GO) run ./bench -hsbx bin/hsbx -out $(BENCH_OUT) $(BENCHFLAGS)
	@{ echo "## Go benchmarks (pure code, no engine)"; echo; echo '```'; \
	  $(GO) test -run '^$$' -bench . -benchmem -benchtime 200x ./runtime/enginecli ./reaper | grep -E '^(Benchmark|cpu:)'; \
	  echo '```'; } >> $(BENCH_OUT)

clean:
	rm -rf bin
