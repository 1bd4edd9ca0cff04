# sluice — see README.md. `make demo` and `make test` work on a fresh machine:
# both install the database server binaries the harness needs when missing.

GO        ?= go
PKGS      ?= ./...
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
STATICCHECK_VERSION := v0.8.2

.PHONY: all build test unit demo bench chaos lint deps clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/sluice ./cmd/sluice

# Unit and integration tests, with the race detector. The integration tests
# start their own throwaway PostgreSQL and MariaDB servers. The integration
# package is the long pole (most of it waits on emulated WAN links), so it
# starts at once beside the other packages, which run one at a time: two
# test binaries at a time on 2 cores, as go test -p 2 would run, but the
# longest one no longer waits its turn behind the others.
test: deps
	@if [ "$(PKGS)" = "./..." ]; then \
		$(GO) test -race -count=1 -timeout 25m ./integration/ & ig=$$!; \
		$(GO) test -race -count=1 -timeout 25m -p 1 $$($(GO) list ./... | grep -v '/integration$$'); rc=$$?; \
		wait $$ig || rc=1; exit $$rc; \
	else \
		$(GO) test -race -count=1 -timeout 25m $(PKGS); \
	fi

# Unit tests only: no database servers.
unit:
	SLUICE_TEST_SKIP_DB=1 $(GO) test -race -count=1 $(PKGS)

# Throwaway source and target, a 96 ms WAN proxy in front of the target, a
# workload, sluice until caught up, checksums, per-row vs pipelined.
demo: deps build
	$(GO) run ./internal/cmd/demo -sluice bin/sluice

# Throughput report (changes/s, RTT, batch sizes, memory); not a test.
bench: deps build
	$(GO) run ./internal/cmd/bench

# Faults under live load for every source mode × target engine: kill -9,
# server crashes, link blackholes, a killer storm, a read-only target; a
# table of what sluice survived, non-zero on any difference. Not a test
# (≤ 30 min on 2 cores); CHAOS_FLAGS=-short runs it in about a minute.
# `make test` runs each scenario once, short (internal/chaos TestChaosShort).
chaos: deps build
	$(GO) run ./internal/cmd/chaos -sluice bin/sluice $(CHAOS_FLAGS)

lint:
	@out=$$(gofmt -l . 2>&1); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

# The harness runs PostgreSQL 15 and MariaDB from the system's binaries.
deps:
	@./internal/scripts/deps.sh

clean:
	rm -rf bin
