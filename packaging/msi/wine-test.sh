#!/usr/bin/env bash
# The Windows lane's MSI step (scripts/windows-lane.sh): builds two MSIs
# with packaging/msi/build.sh (v1.0.0, v2.0.0) and drives Wine's msiexec
# through install, upgrade, a refused downgrade and uninstall, checking
# the files under Program Files, `corral version` by full path and through
# PATH, the Uninstall (Add/Remove Programs) entry, the UpgradeCodes
# registration and the system PATH at each step.
#   packaging/msi/wine-test.sh OUTDIR
#   WINEPREFIX  the lane's prefix (scripts/wine/setup.sh): it is copied to
#               OUTDIR/prefix, so installing never changes the shared one
#               (the copy gets its own wineserver, stopped at exit)
# Prints one line per check: PASS, FAIL, SKIP (with its reason) or
# "WINE ARTIFACT" (what Wine shows where Windows Installer would differ,
# never counted as a pass), then a summary. Wine's msiexec is Wine's own
# msi.dll, not Windows Installer: a pass proves the package's tables as
# Wine reads them (Wine implements the actions used here, Environment
# included), not Windows Installer's behaviour (docs/install-windows.md).
# Exits 1 if a check failed. With CI=true missing tools fail; otherwise
# the step is skipped.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
out=$1
start=$SECONDS
pass=0 fail=0 skip=0 art=0

say() { printf 'msi: %s\n' "$*"; }
ok() { pass=$((pass + 1)); say "PASS $*"; }
bad() { fail=$((fail + 1)); say "FAIL $*"; }
skipped() { skip=$((skip + 1)); say "SKIP $*"; }
artifact() { art=$((art + 1)); say "WINE ARTIFACT $*"; }
check() { # check DESCRIPTION COMMAND...: PASS when the command succeeds
	local what=$1
	shift
	if "$@"; then ok "$what"; else bad "$what"; fi
}

missing=()
for t in wine wineserver wixl msibuild python3; do
	command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ ${#missing[@]} -gt 0 ] || [ -z "${WINEPREFIX:-}" ] || ! [ -f "${WINEPREFIX:-/nonexistent}/system.reg" ]; then
	why=${missing[*]:+missing ${missing[*]}}
	[ -f "${WINEPREFIX:-/nonexistent}/system.reg" ] || why="${why:+$why, }no booted WINEPREFIX"
	if [ "${CI:-}" = true ]; then
		bad "the MSI step cannot run ($why)"
		exit 1
	fi
	skipped "the MSI step ($why; scripts/wine/setup.sh installs wine, wixl and msitools)"
	exit 0
fi

rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
"$here/build.sh" v1.0.0 "$out" >/dev/null || { bad "building the v1.0.0 MSI (above)"; exit 1; }
# v2.0.0 signed (corral.exe, then the MSI) with a throwaway self-signed
# code-signing certificate: that build.sh's signing works on this machine.
signed=
if command -v openssl >/dev/null && command -v osslsigncode >/dev/null; then
	mkdir -p "$out/sign"
	openssl req -x509 -newkey rsa:3072 -nodes -days 1 -subj "/CN=Corral lane test signing (throwaway)" \
		-addext extendedKeyUsage=codeSigning -keyout "$out/sign/key.pem" -out "$out/sign/cert.pem" 2>/dev/null
	CORRAL_MSI_SIGN_CERT=$out/sign/cert.pem CORRAL_MSI_SIGN_KEY=$out/sign/key.pem \
		"$here/build.sh" v2.0.0 "$out" >/dev/null 2>"$out/sign/build.log" ||
		{ cat "$out/sign/build.log" >&2; bad "building the signed v2.0.0 MSI (above)"; exit 1; }
	signed=1
else
	"$here/build.sh" v2.0.0 "$out" >/dev/null || { bad "building the v2.0.0 MSI (above)"; exit 1; }
fi
v1=$out/corral-v1.0.0-windows-amd64.msi v2=$out/corral-v2.0.0-windows-amd64.msi
verify() { osslsigncode verify -in "$1" -CAfile "$out/sign/cert.pem" >"$out/sign/verify.log" 2>&1; }
if [ -n "$signed" ]; then
	check "the v2.0.0 MSI's Authenticode signature verifies (osslsigncode sign/verify, throwaway self-signed certificate)" verify "$v2"
else
	skipped "signing (openssl or osslsigncode missing)"
fi

# A private copy of the prefix (695 MB, about a second): the shared
# prefix's registry is on disk once booted (scripts/wine/setup.sh).
pfx=$out/prefix
cp -a "$WINEPREFIX" "$pfx"
rm -f "$pfx/.corral-wineserver.lock"
export WINEPREFIX=$pfx WINEDEBUG=-all
# bcryptprimitives=n: the ProcessPrng shim corral.exe's Go runtime needs
# (scripts/wine/setup.sh put it in the prefix's system32).
export WINEDLLOVERRIDES="bcryptprimitives=n;mscoree,mshtml="
trap 'WINEPREFIX=$pfx wineserver -k 2>/dev/null || true; rm -rf "$pfx"' EXIT
# The first process of a wineserver starts Wine's services, which inherit
# its stdio and outlive it (scripts/wine/exec): start them away from ours.
wineserver -p </dev/null >/dev/null 2>&1 || true
wine cmd /c exit 0 </dev/null >/dev/null 2>&1

winpath() { printf 'Z:%s' "${1//\//\\}"; }
w() { wine "$@" </dev/null 2>/dev/null | tr -d '\r'; }
msiexec() { # msiexec /i|/x MSI LOG: its exit status
	wine msiexec "$1" "$(winpath "$2")" /qn /l*v "$(winpath "$3")" </dev/null >/dev/null 2>&1
}
uninst='HKLM\Software\Microsoft\Windows\CurrentVersion\Uninstall'
envkey='HKLM\System\CurrentControlSet\Control\Session Manager\Environment'
upcodes='HKLM\Software\Microsoft\Windows\CurrentVersion\Installer\UpgradeCodes'
# UpgradeCode in corral.wxs, packed as Windows Installer keys it (each
# GUID field reversed, the last two fields byte by byte).
upgrade=$(sed -n 's/.*UpgradeCode="\([0-9A-F-]*\)".*/\1/p' "$here/corral.wxs")
packed=$(python3 -c '
import sys
g = sys.argv[1].replace("-", "")
r = g[7::-1] + g[11:7:-1] + g[15:11:-1]
r += "".join(g[i + 1] + g[i] for i in range(16, 32, 2))
print(r)' "$upgrade")
dir="$pfx/drive_c/Program Files/Corral"
exe='C:\Program Files\Corral\corral.exe'

# corral_entries: "KEY|DisplayVersion|Publisher|InstallLocation|UninstallString"
# for each Uninstall subkey whose DisplayName is Corral.
corral_entries() {
	w reg query "$uninst" /s | python3 -c '
import sys
key, vals, rows = None, {}, []
def flush():
    if key and vals.get("DisplayName") == "Corral":
        rows.append("|".join([key.rsplit("\\", 1)[1]] + [vals.get(k, "") for k in ("DisplayVersion", "Publisher", "InstallLocation", "UninstallString")]))
for line in sys.stdin:
    line = line.rstrip("\n")
    if line.startswith("HKEY_"):
        flush()
        key, vals = line, {}
    elif line.startswith("    "):
        parts = line.strip().split(None, 2)
        if len(parts) == 3:
            vals[parts[0]] = parts[2]
        elif len(parts) == 2:
            vals[parts[0]] = ""
flush()
print("\n".join(rows))'
}
syspath() { w reg query "$envkey" /v PATH | sed -n 's/^ *PATH *REG_[A-Z_]* *//p'; }
path_count() { syspath | tr ';' '\n' | grep -ciFx 'C:\Program Files\Corral\' || true; }
upgrade_products() { w reg query "$upcodes\\$packed" | grep -c '^    ' || true; }
version_of() { w "$@" version | head -n1; }

path0=$(syspath)

# 1. Install v1.0.0.
if msiexec /i "$v1" "$out/install-v1.log"; then ok "install v1.0.0 (msiexec /i /qn)"; else bad "install v1.0.0: msiexec failed ($out/install-v1.log)"; fi
check "C:\\Program Files\\Corral\\corral.exe and README.md installed" test -f "$dir/corral.exe" -a -f "$dir/README.md"
got=$(version_of "$exe")
check "\"$exe\" version prints corral v1.0.0 (got: $got)" test "$got" = "corral v1.0.0"
e=$(corral_entries)
n=$(grep -c . <<<"$e" || true)
check "one Add/Remove Programs entry for Corral (found $n)" test "$n" = 1
IFS='|' read -r code1 dv pub loc unstr <<<"$e"
check "ARP entry: DisplayVersion 1.0.0, Publisher Corral Sandbox, InstallLocation C:\\Program Files\\Corral\\, UninstallString MsiExec.exe /X$code1 (got: $dv, $pub, $loc, $unstr)" \
	test "$dv|$pub|$loc|$unstr" = "1.0.0|Corral Sandbox|C:\\Program Files\\Corral\\|MsiExec.exe /X$code1"
size=$(w reg query "$uninst\\$code1" /v EstimatedSize | sed -n 's/^ *EstimatedSize *REG_DWORD *//p')
[ "$size" != 0x0 ] || artifact "the ARP entry's EstimatedSize is 0: Wine's msi.dll does not write the costed size, Windows Installer does (not checked)"
n=$(path_count)
check "the system PATH has C:\\Program Files\\Corral\\ once (Environment table applied by Wine's msi.dll; found $n)" test "$n" = 1
if [ "$n" = 1 ]; then
	# cd /d C:\: not the Unix working directory, which might hold a corral.exe.
	got=$(w cmd /c 'cd /d C:\ && corral version' | head -n1)
	check "corral version through PATH in a new wine cmd prints corral v1.0.0 (got: $got)" test "$got" = "corral v1.0.0"
	artifact "a process Wine starts from Linux builds its environment from the registry, so the new cmd sees the new PATH; on Windows a new cmd inherits it from Explorer, which rereads it on the WM_SETTINGCHANGE msiexec broadcasts: that broadcast is not exercised here"
else
	skipped "corral version through PATH (the PATH entry is missing, above)"
fi

# 2. Upgrade to v2.0.0 (MajorUpgrade: RemoveExistingProducts after InstallValidate).
if msiexec /i "$v2" "$out/install-v2.log"; then ok "install v2.0.0 over v1.0.0 (msiexec /i /qn)"; else bad "upgrade to v2.0.0: msiexec failed ($out/install-v2.log)"; fi
if [ -n "$signed" ]; then
	check "the installed v2.0.0 corral.exe carries its Authenticode signature" verify "$dir/corral.exe"
	artifact "Wine's msiexec installs a signed and an unsigned MSI alike: Windows shows the publisher from the signature (UAC prompt, SmartScreen reputation), Wine checks nothing"
fi
got=$(version_of "$exe")
check "\"$exe\" version prints corral v2.0.0 after the upgrade (got: $got)" test "$got" = "corral v2.0.0"
e=$(corral_entries)
n=$(grep -c . <<<"$e" || true)
check "one Add/Remove Programs entry for Corral after the upgrade (found $n)" test "$n" = 1
IFS='|' read -r code2 dv _ <<<"$e"
check "the entry is v2.0.0's, a new ProductCode (v1 $code1, v2 $code2, DisplayVersion $dv)" test "$dv" = 2.0.0 -a "$code2" != "$code1"
n=$(upgrade_products)
check "one product registered under the UpgradeCode $upgrade (found $n)" test "$n" = 1
n=$(path_count)
check "the system PATH has C:\\Program Files\\Corral\\ once after the upgrade (found $n)" test "$n" = 1

# 3. A downgrade is refused (LaunchCondition NOT WIX_DOWNGRADE_DETECTED).
if msiexec /i "$v1" "$out/downgrade.log"; then bad "installing v1.0.0 over v2.0.0 succeeded"; else ok "installing v1.0.0 over v2.0.0 is refused (MajorUpgrade's downgrade check)"; fi
got=$(version_of "$exe")
check "v2.0.0 still installed after the refused downgrade (got: $got)" test "$got" = "corral v2.0.0"

# 4. Uninstall.
if msiexec /x "$v2" "$out/uninstall.log"; then ok "uninstall v2.0.0 (msiexec /x /qn)"; else bad "uninstall: msiexec failed ($out/uninstall.log)"; fi
check "C:\\Program Files\\Corral is gone" test ! -e "$dir"
e=$(corral_entries)
check "no Add/Remove Programs entry for Corral remains (found: ${e:-none})" test -z "$e"
n=$(upgrade_products)
check "no product remains under the UpgradeCode (found $n)" test "$n" = 0
n=$(path_count)
check "no C:\\Program Files\\Corral\\ entry remains in the system PATH (found $n)" test "$n" = 0
p=$(syspath)
norm() { sed -e 's/;;*/;/g' -e 's/;$//' <<<"$1"; }
if [ "$p" = "$path0" ]; then
	ok "the system PATH is as before the install"
elif [ "$(norm "$p")" = "$(norm "$path0")" ]; then
	artifact "the system PATH keeps an empty entry (before: $path0; after: $p): Wine's msi.dll removes the appended value but not the separator after [~]; Windows Installer removes both (Environment table, Value column; ICE65). Not counted as a pass"
else
	bad "the system PATH is as before the install (before: $path0; after: $p)"
fi

artifact "Wine's msiexec is Wine's msi.dll, not Windows Installer: no UAC elevation, no ICE validation, no Restart Manager, no rollback tested; the passes above prove the package's tables as Wine applies them"

secs=$((SECONDS - start))
say "$pass checks passed, $fail failed, $skip skipped, $art Wine artifacts noted; ${secs} s"
[ "$fail" = 0 ]
