#!/usr/bin/env bash
# Regenerates gateway/gen from gateway/proto with pinned generators:
# protoc (Debian's protobuf-compiler), protoc-gen-go and
# protoc-gen-connect-go at the versions go.mod uses. The output is
# committed; CI does not run this.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install google.golang.org/protobuf/cmd/protoc-gen-go@"$(go list -m -f '{{.Version}}' google.golang.org/protobuf)"
GOBIN=$bin go install connectrpc.com/connect/cmd/protoc-gen-connect-go@"$(go list -m -f '{{.Version}}' connectrpc.com/connect)"
rm -rf gateway/gen
mkdir -p gateway/gen
PATH="$bin:$PATH" protoc -I gateway/proto \
	--go_out=gateway/gen --go_opt=paths=source_relative \
	--connect-go_out=gateway/gen --connect-go_opt=paths=source_relative \
	gateway/proto/corral/gateway/v1/gateway.proto
echo "generated: $(find gateway/gen -name '*.go' | sort | tr '\n' ' ')"
