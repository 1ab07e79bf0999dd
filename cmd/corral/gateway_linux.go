package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/corral-sandbox/corral/gateway"
	"github.com/corral-sandbox/corral/internal/trust"
	"github.com/corral-sandbox/corral/provider/docker"
	"github.com/corral-sandbox/corral/provider/linux"
)

// gatewayProviderNames are the providers a gateway runs sandboxes on
// here, in --provider's default order (mxc only when named).
var gatewayProviderNames = []string{"linux", "docker", "mxc"}

// defaultGatewayProviders is --provider's default.
var defaultGatewayProviders = []string{"linux", "docker"}

// gatewayProvider is the provider called name, nil for none of
// gatewayProviderNames.
func gatewayProvider(name string) gateway.Provider {
	switch name {
	case "linux":
		return linux.New()
	case "docker":
		return docker.New()
	case "mxc":
		return mxcProvider() // the backend is the operator's (CORRAL_MXC_BACKEND), never a request's
	}
	return nil
}

// makeGatewayDir makes dir (the database's, the logs) the gateway's alone, in
// directories no other user controls (trust.MkdirAll).
func makeGatewayDir(dir string) error {
	return trust.MkdirAll(dir, 0o700, uint32(os.Geteuid()), nil)
}

// lockGatewayDB takes the one-gateway-per-database lock (flock on
// DB.lock, not waiting): a second gateway would reconcile the first's
// work away. release gives it back.
func lockGatewayDB(db string) (release func(), err error) {
	lock, err := os.OpenFile(db+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s: another gateway uses this database (%v)", db, err)
	}
	return func() { lock.Close() }, nil
}

// loadToken reads the bearer token from path, or creates it (0600, 32
// random bytes in hex) when missing. Whoever can write or replace the file
// chooses the token, so it must be a regular file of the gateway's euid
// that no one else can read or write (mode 0600 or stricter), in
// directories no other user controls (trust.Dirs, as for a service's base
// directory). It is opened without following a link (O_NOFOLLOW) and
// checked on the open descriptor (fstat), so the file checked is the file
// read.
func loadToken(path string) (string, error) {
	euid := uint32(os.Geteuid())
	if err := trust.MkdirAll(filepath.Dir(path), 0o700, euid, nil); err != nil {
		var u *trust.Untrusted
		switch {
		case errors.As(err, &u) && u.NotDir:
			return "", fmt.Errorf("token file %s: %v: give --token-file a path without symbolic links", path, u)
		case errors.As(err, &u):
			return "", fmt.Errorf("token file %s: %v, so that user could replace the token: keep it in directories only uid %d or root can write (chmod go-w %s), or give another --token-file", path, u, euid, u.Dir)
		}
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	// O_NONBLOCK: a fifo planted in its place does not block the open.
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return createToken(path)
	case errors.Is(err, syscall.ELOOP):
		return "", fmt.Errorf("token file %s is a symbolic link, which another file can be put behind: replace it with the file itself, or give --token-file the real path", path)
	case err != nil:
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("token file %s: fstat: %w", path, err)
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return "", fmt.Errorf("token file %s is not a regular file (mode %o): remove it (a new token is made) or give --token-file a file", path, st.Mode)
	case st.Uid != euid:
		return "", fmt.Errorf("token file %s is owned by uid %d, not the gateway's uid %d, so that user chose the token or can change it: remove it (a new one is made), or chown %d %s if the token is yours", path, st.Uid, euid, euid, path)
	case st.Mode&0o077 != 0:
		return "", fmt.Errorf("token file %s is mode %04o: others could read it (chmod 600 %s)", path, st.Mode&0o7777, path)
	}
	return readToken(f, "token file "+path, ": remove it (a new token is made) or write one into it")
}

// createToken makes the token file: never over an existing file or link
// (O_EXCL), readable by the gateway's uid only.
func createToken(path string) (string, error) {
	tok := newToken()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("token file: %w", err)
	}
	return tok, f.Close()
}

// readClientToken reads the bearer token a client sends. As ssh does for
// a private key, a token file that others may read is refused (whoever
// reads it controls every sandbox); it may be a link (secret mounts are).
func readClientToken(path string) (string, error) {
	fd, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--token-file %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("--token-file %s is mode %04o: others could read the token, which controls every sandbox of the gateway (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	return readToken(fd, "--token-file "+path, "")
}
