#!/usr/bin/env bash
# Regenerates the Go code of connectrpc/conformance's service protos, which
# the conformance module ships only as an internal package (so no other
# module can import it). The protos are read from the module cache, at the
# version of connectrpc.com/conformance in go.mod (the runner's version), so
# the server and the runner speak the same service.
#
# Generator versions are pinned so that the committed code is reproducible:
#   protoc-gen-go         v1.36.12 (= google.golang.org/protobuf in go.mod)
#   protoc-gen-connect-go v1.21.1  (= connectrpc.com/connect in go.mod)
# protoc itself comes from the system (Debian: apt-get install -y
# protobuf-compiler); the committed code was generated with libprotoc 3.21.12.
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION=v1.21.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

if ! command -v protoc >/dev/null 2>&1; then
	echo "generate.sh: protoc not found; install it first (Debian: apt-get install -y protobuf-compiler)" >&2
	exit 1
fi

src="$(go mod download -json connectrpc.com/conformance | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [ -z "$src" ] || [ ! -d "$src/proto" ]; then
	echo "generate.sh: cannot find connectrpc.com/conformance's protos in the module cache" >&2
	exit 1
fi

gobin="$(mktemp -d)"
trap 'rm -rf "$gobin"' EXIT
(
	cd "$gobin"
	GOBIN="$gobin" GOFLAGS= go install "google.golang.org/protobuf/cmd/protoc-gen-go@${PROTOC_GEN_GO_VERSION}"
	GOBIN="$gobin" GOFLAGS= go install "connectrpc.com/connect/cmd/protoc-gen-connect-go@${PROTOC_GEN_CONNECT_GO_VERSION}"
)

# The protos name no go_package (the conformance module sets it with buf's
# managed mode), so each file's Go package is given here.
pkg=github.com/levee-go/levee/conformance/connectsuite/internal/conformancev1
files=(config.proto server_compat.proto service.proto)
mopts=()
for f in "${files[@]}"; do
	mopts+=("--go_opt=Mconnectrpc/conformance/v1/$f=$pkg;conformancev1")
	mopts+=("--connect-go_opt=Mconnectrpc/conformance/v1/$f=$pkg;conformancev1")
done

out="$(mktemp -d)"
trap 'rm -rf "$gobin" "$out"' EXIT
PATH="$gobin:$PATH" protoc \
	--proto_path="$src/proto" \
	--go_out="$out" --go_opt=module=github.com/levee-go/levee/conformance/connectsuite "${mopts[@]}" \
	--connect-go_out="$out" --connect-go_opt=module=github.com/levee-go/levee/conformance/connectsuite \
	"${files[@]/#/connectrpc/conformance/v1/}"
rm -rf internal/conformancev1
mkdir -p internal
cp -r "$out/internal/conformancev1" internal/
echo "generate.sh: wrote $(cd internal && find conformancev1 -name '*.go' | sort | tr '\n' ' ')($(protoc --version), connectrpc.com/conformance at $(basename "$src"))" >&2
