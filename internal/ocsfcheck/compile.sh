#!/usr/bin/env bash
# Compile an OCSF schema checkout with the OCSF's compiler and write it,
# zstd-compressed, to stdout (see README.md).
#   compile.sh SCHEMA_DIR COMPILER_DIR
# The compiler (pure Python, no dependencies) uses the `type X = ...`
# statement of Python 3.12; on an older python3 a copy of it is rewritten to
# plain assignments first, which changes nothing it computes.
set -euo pipefail
schema=$1 compiler=$2
src=$compiler/src
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp -r "$compiler/src/ocsf_schema_compiler" "$tmp/"
	sed -i -E 's/^(\s*)type ([A-Za-z_]+) = /\1\2 = /' "$tmp"/ocsf_schema_compiler/*.py
	# jsonish.py's recursive aliases only annotate: make them plain types.
	sed -i -E 's/^JValue = .*/JValue = object/; s/^JObject = .*/JObject = dict/; s/^JArray = .*/JArray = list/' "$tmp/ocsf_schema_compiler/jsonish.py"
	src=$tmp
fi
PYTHONPATH=$src python3 -m ocsf_schema_compiler --ignore-platform-extensions "$schema" | zstd -19 -q -c
