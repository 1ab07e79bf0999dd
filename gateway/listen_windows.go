package gateway

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// DefaultAddr is where the gateway listens and the CLI connects when
// neither --listen/--gateway nor CORRAL_GATEWAY says otherwise: the named
// pipe \\.\pipe\corral-gateway-SID, SID the caller's user (pipe names are
// machine-wide: one per user).
func DefaultAddr() string {
	name := "corral-gateway"
	if u, err := windows.GetCurrentProcessToken().GetTokenUser(); err == nil {
		name += "-" + u.User.Sid.String()
	}
	return "pipe:" + name
}

// DefaultDB is the gateway's database:
// %LOCALAPPDATA%\corral\gateway\gateway.db (os.UserCacheDir is
// %LOCALAPPDATA%, the profile's non-roaming folder).
func DefaultDB() string {
	d, err := os.UserCacheDir()
	if err != nil {
		home, _ := os.UserHomeDir()
		d = filepath.Join(home, "AppData", "Local")
	}
	return filepath.Join(d, "corral", "gateway", "gateway.db")
}
