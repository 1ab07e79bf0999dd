package gateway

import (
	"os"
	"path/filepath"
)

// DefaultSocket is where the gateway listens and the CLI connects when
// neither --listen/--gateway nor CORRAL_GATEWAY says otherwise:
// /run/corral/gateway.sock as root, else $XDG_RUNTIME_DIR/corral/gateway.sock,
// else ~/.local/state/corral/gateway.sock.
func DefaultSocket() string {
	if os.Getuid() == 0 {
		return "/run/corral/gateway.sock"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "corral", "gateway.sock")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "corral", "gateway.sock")
}

// DefaultAddr is the gateway's default address: "unix:" + DefaultSocket.
func DefaultAddr() string { return "unix:" + DefaultSocket() }

// DefaultDB is the gateway's database: /var/lib/corral/gateway/gateway.db
// as root, else ~/.local/state/corral/gateway/gateway.db.
func DefaultDB() string {
	if os.Getuid() == 0 {
		return "/var/lib/corral/gateway/gateway.db"
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "corral", "gateway", "gateway.db")
}
