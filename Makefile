# levee build and test targets. `make test` is what CI runs (.ci/run).
GO ?= go

.PHONY: test vet tidy layers race bench proto

## test: vet and run every test with the race detector. Packages run one at a
## time (-p 1): the demo's end-to-end test pins server processes to CPUs and
## measures their goodput, which other packages' tests would steal from.
test: tidy vet
	$(GO) test -race -count=1 -p 1 ./...
	@# Full-size memory tests that the race detector makes too slow.
	$(GO) test -count=1 -run 'Flood' ./ratelimit

vet:
	$(GO) vet ./...

## tidy: fail when go.mod or go.sum are not what `go mod tidy` would write.
tidy:
	$(GO) mod tidy -diff

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
