package main

import (
	"os"
	"path/filepath"
	"runtime"

	"github.com/corral-sandbox/corral/provider/mxc"
)

// Provider configuration is chosen by the operator, never per request
// (environment, documented in docs/providers/mxc.md):
//
//	CORRAL_MXC_BACKEND   process_container (default) or isolation_session
//	                     (for the gateway: isolation_session sandboxes
//	                     outlive it; process_container ones end with it)
//	CORRAL_MXC_WXC_EXEC  path of wxc-exec (default: looked up in PATH)
//	CORRAL_MXC_STATE     state directory for session records
//	                     (default: %LOCALAPPDATA%\corral\mxc on Windows, else
//	                     $XDG_STATE_HOME or ~/.local/state, /corral/mxc)
func mxcProvider() *mxc.Provider {
	cfg := mxc.Config{Backend: mxc.Backend(os.Getenv("CORRAL_MXC_BACKEND")), WxcExec: os.Getenv("CORRAL_MXC_WXC_EXEC")}
	state := os.Getenv("CORRAL_MXC_STATE")
	if local := os.Getenv("LOCALAPPDATA"); state == "" && runtime.GOOS == "windows" && local != "" {
		state = filepath.Join(local, "corral", "mxc") // where Windows keeps a user's program state
	}
	if state == "" {
		base := os.Getenv("XDG_STATE_HOME")
		if base == "" {
			base = filepath.Join(homeDir(), ".local", "state")
		}
		state = filepath.Join(base, "corral", "mxc")
	}
	return mxc.New(cfg, state)
}
