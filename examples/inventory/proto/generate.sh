#!/usr/bin/env bash
# Regenerates the Go code of the CoreCart inventory proto (run by `make proto`).
#
# Generator versions are pinned so that the committed code is reproducible:
#   protoc-gen-go       v1.36.12  (= google.golang.org/protobuf in go.mod)
#   protoc-gen-go-grpc  v1.6.2    (generated code needs grpc >= v1.64; go.mod has v1.85.0)
#   protoc-gen-connect-go v1.21.1 (= connectrpc.com/connect in go.mod), with the
#                       `simple` option: its handler interface has the gRPC service's
#                       method signatures, so one inventory.Server serves both
# protoc itself comes from the system (Debian: apt-get install -y protobuf-compiler);
# the committed code was generated with libprotoc 3.21.12.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
PROTOC_GEN_CONNECT_GO_VERSION=v1.21.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v protoc >/dev/null 2>&1; then
	echo "generate.sh: protoc not found; install it first:" >&2
	echo "  Debian/Ubuntu: sudo apt-get update && sudo apt-get install -y protobuf-compiler" >&2
	echo "  macOS:         brew install protobuf" >&2
	echo "  or download a release from https://github.com/protocolbuffers/protobuf/releases" >&2
	exit 1
fi
if ! command -v go >/dev/null 2>&1; then
	echo "generate.sh: go not found on PATH" >&2
	exit 1
fi

gobin="$(mktemp -d)"
trap 'rm -rf "$gobin"' EXIT

echo "generate.sh: installing protoc-gen-go@${PROTOC_GEN_GO_VERSION}, protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION} and protoc-gen-connect-go@${PROTOC_GEN_CONNECT_GO_VERSION}" >&2
# Run outside the module so its go.mod neither constrains nor records the tools.
(
	cd "$gobin"
	GOBIN="$gobin" GOFLAGS= go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
	GOBIN="$gobin" GOFLAGS= go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@${PROTOC_GEN_GO_GRPC_VERSION}"
	GOBIN="$gobin" GOFLAGS= go install "connectrpc.com/connect/cmd/protoc-gen-connect-go@${PROTOC_GEN_CONNECT_GO_VERSION}"
)

cd "$here"
PATH="$gobin:$PATH" protoc \
	--proto_path=. \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	--connect-go_out=. --connect-go_opt=paths=source_relative,simple \
	corecart/inventory/v1/inventory.proto

echo "generate.sh: wrote $(ls corecart/inventory/v1/*.go corecart/inventory/v1/*/*.go | tr '\n' ' ')($(protoc --version))" >&2
