@echo off
rem Start the OpenClaw gateway on loopback PORT with its state in the
rem session's home (%USERPROFILE%): the command a Corral service runs on
rem Windows (README.md, "On Windows"). It lives in the payload directory
rem beside node.exe and node_modules\openclaw, which corral service start
rem --payload copies into the agent user's profile. On first start it
rem writes a minimal config (token auth with a random token, no update
rem checks, no catalog refresh, no mDNS, no cron), created new so an
rem existing one is never overwritten, then runs the gateway.
rem
rem   usage: gateway.cmd PORT
setlocal
set "port=%~1"
if "%port%"=="" (
  echo usage: gateway.cmd PORT 1>&2
  exit /b 2
)
set "prefix=%~dp0"
set "node=%prefix%node.exe"
set "cfg=%USERPROFILE%\.openclaw\openclaw.json"
if not exist "%cfg%" (
  "%node%" -e "const fs=require('fs'),path=require('path'),c=require('crypto');const [cfg,port]=process.argv.slice(1);fs.mkdirSync(path.dirname(cfg),{recursive:true});fs.writeFileSync(cfg,JSON.stringify({gateway:{mode:'local',bind:'loopback',port:+port,auth:{mode:'token',token:c.randomBytes(24).toString('hex')}},update:{checkOnStart:false,auto:{enabled:false}},models:{catalogRefresh:{enabled:false}},discovery:{mdns:{mode:'off'}},cron:{enabled:false},telemetry:{enabled:false},logging:{file:path.join(path.dirname(cfg),'logs','gateway.log')}},null,2),{flag:'wx'})" "%cfg%" "%port%" || exit /b 1
)
cd /d "%USERPROFILE%"
set "PATH=%prefix%;%PATH%"
set OPENCLAW_NO_RESPAWN=1
set OPENCLAW_SKIP_CHANNELS=1
set OPENCLAW_NO_AUTO_UPDATE=1
set OPENCLAW_DISABLE_BONJOUR=1
set "NODE_COMPILE_CACHE=%USERPROFILE%\.cache\node-compile-cache"
"%node%" "%prefix%node_modules\openclaw\openclaw.mjs" gateway run --bind loopback --port %port%
