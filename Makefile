# levee build and test targets. `make test` is what CI runs (.ci/run).
GO ?= go

.PHONY: test fmt vet tidy build staticcheck benchmods tools layers race bench proto fuzz soak

# staticcheck at a pinned release (v0.8.2 is staticcheck 2026.2.2), run
# through the Go module proxy: nothing to install beyond Go itself. Raise
# it deliberately, fixing what a new release finds.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# The modules of their own under bench/ (the peer and Redis comparisons the
# docs cite); each replaces levee with this tree.
BENCH_MODULES := bench/peers bench/redis
# Modules of their own whose tests make test runs: connectrpc/conformance's
# server suite through connectguard, whose runner stays out of levee's go.mod.
TEST_MODULES := conformance/connectsuite

## test: check the modules, vet, build and lint, then run every test with
## the race detector. Packages run one at a time (-p 1): the demo's
## end-to-end test pins server processes to CPUs and measures their
## goodput, which other packages' tests would steal from.
test: fmt tidy vet build staticcheck benchmods
	$(GO) test -race -count=1 -p 1 ./...
	@for m in $(TEST_MODULES); do echo "cd $$m && $(GO) test -race -count=1 ./..."; (cd $$m && $(GO) test -race -count=1 ./...) || exit 1; done
	@# Full-size memory tests that the race detector makes too slow,
	@# allocation counts that its sync.Pool randomises, and
	@# tests of the scheduler's order, which the race detector randomises.
	$(GO) test -count=1 -run 'Flood' ./ratelimit
	$(GO) test -count=1 -run 'TestAdmittedPathAllocations' ./connectguard
	$(GO) test -count=1 ./internal/netpoll
	$(GO) test -count=1 -run 'TestWaitedTurnYieldsFirst|TestShortWaitedTurnDoesNotYield|TestShortCallStartsWithoutYielding|TestTurnWaitsForUnreadRequest|TestOneTurnForHandlersSharingOneProcessor' ./runlimit
	@# The simulated table at full size, and its bounds and the ported
	@# tests' on seeds 2-4 (a few rows and one seed under the race detector).
	$(GO) test -count=1 -run 'TestSimShapes|TestSimAblation|TestSimPortedOtherSeeds' ./runlimit

## fmt: fail, naming the files, when a Go file is not as gofmt writes it.
fmt:
	@out=$$("$$($(GO) env GOROOT)/bin/gofmt" -l .); if [ -n "$$out" ]; then echo "gofmt -l: not formatted:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## tidy: fail when go.mod or go.sum, here or in a bench module, are not
## what `go mod tidy` would write.
tidy:
	$(GO) mod tidy -diff
	@for m in $(BENCH_MODULES) $(TEST_MODULES); do echo "cd $$m && $(GO) mod tidy -diff"; (cd $$m && $(GO) mod tidy -diff) || exit 1; done

## build: build every package and command, examples/ and cmd/ included
## (to /dev/null: a lone main package would otherwise leave its binary).
build:
	$(GO) build -o /dev/null ./...

## staticcheck: lint every package, tests included, at the pinned release.
## A finding fails the build; silence one only where it is wrong, with
## //lint:ignore CHECK and the reason.
staticcheck:
	$(STATICCHECK) ./...

## benchmods: vet, build and lint the bench modules (their tests need
## running peers or Redis and are run by hand; see their READMEs) and the
## test modules (whose tests `test` runs).
benchmods:
	@for m in $(BENCH_MODULES) $(TEST_MODULES); do \
		echo "== $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) build -o /dev/null ./... && $(STATICCHECK) ./...) || exit 1; \
	done

## tools: fetch and build the pinned tools, so that a network failure is
## reported as one and not as a lint failure (.ci/run runs it first).
tools:
	$(STATICCHECK) -version

## layers: fail when a package below the transport imports gRPC (see
## internal/layers).
layers:
	$(GO) test -count=1 ./internal/layers

## bench: run the benchmarks that back the performance goals (see README).
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=5 ./...

## proto: regenerate the committed gRPC code of the example service.
proto:
	./examples/inventory/proto/generate.sh

## fuzz: run every fuzz target in turn for FUZZTIME each. Not part of
## `make test`, which runs the committed seed corpora (testdata/fuzz/) as
## ordinary tests. The targets are found in the sources: a new
## `func FuzzXxx(f *testing.F)` in a _test.go file is picked up with no
## change here. FUZZ_TARGETS="./pkg:FuzzName ..." runs a chosen few; a
## failing input is saved under the package's testdata/fuzz/FuzzName/ and
## becomes a seed once committed.
FUZZTIME ?= 30s
FUZZ_TARGETS ?= $(shell grep -rE --include='*_test.go' --exclude-dir=bench -o '^func Fuzz[A-Za-z0-9_]*' . \
	| sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz.*)$$|\1:\2|' | sort -u)
fuzz:
	@failed=; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

## soak: a 5-minute 10x overload of `levee serve` under ghz, sampling its
## goroutines and RSS (see scripts/soak.sh; takes longer than DURATION).
## Not part of `make test`.
soak:
	./scripts/soak.sh
