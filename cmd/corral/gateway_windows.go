package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/winfile"
)

// The Windows counterparts of gateway_linux.go's trust pieces. Where Linux
// has modes and uids, these read owners and DACLs (internal/winfile):
// "no one else can read or write" is winfile.Private (no ACE for anyone
// but the caller, SYSTEM and Administrators), "a directory no other user
// controls" is winfile.TrustedDir, and a path is walked from its volume
// root by handle, never through a symlink or junction (winfile.Walk).

// makeGatewayDir makes dir (the database's, the logs) the gateway's
// alone, in directories no other user controls: the counterpart of
// trust.MkdirAll. Missing directories are made with an owner-only
// protected DACL (winfile.OwnerOnlyDir); every existing one on the way
// must pass winfile.TrustedDir (dir itself as the last: no one else may
// add to it). dir itself then gets the owner-only DACL even when it
// existed (winfile.MakePrivateDir): what the store makes in it inherits
// its DACL, having no mode of its own.
func makeGatewayDir(dir string) error {
	user, err := winfile.User()
	if err != nil {
		return err
	}
	h, err := trustedWalk(user).OpenDir(dir, 0)
	if err != nil {
		return walkErr(err, user, "give a path without symbolic links or junctions", "another user could plant or replace what the gateway keeps in it", "")
	}
	windows.CloseHandle(h)
	return winfile.MakePrivateDir(dir)
}

// lockGatewayDB takes the one-gateway-per-database lock: LockFileEx
// (LOCKFILE_EXCLUSIVE_LOCK|LOCKFILE_FAIL_IMMEDIATELY, not waiting) on the
// first byte of DB.lock, made owner-only when missing and opened without
// following a link (winfile.Open). A second gateway would reconcile the
// first's work away. Windows drops the lock when the handle closes, and
// so when the process ends; release closes it.
func lockGatewayDB(db string) (release func(), err error) {
	user, err := winfile.User()
	if err != nil {
		return nil, err
	}
	sd, err := winfile.OwnerOnly(user)
	if err != nil {
		return nil, err
	}
	path := db + ".lock"
	h, err := winfile.Open(path, windows.GENERIC_READ|windows.GENERIC_WRITE, windows.FILE_OPEN_IF, windows.FILE_NON_DIRECTORY_FILE, sd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var ol windows.Overlapped
	if err := windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol); err != nil {
		windows.CloseHandle(h)
		return nil, fmt.Errorf("%s: another gateway uses this database (%v)", db, err)
	}
	return func() { windows.CloseHandle(h) }, nil
}

// loadToken reads the bearer token from path, or creates it (32 random
// bytes in hex and a newline) when missing. Whoever can write or replace
// the file chooses the token, so, as on Linux: its directories are walked
// by handle, no symlink or junction followed, and must be no other user's
// to change (winfile.TrustedDir; missing ones are made owner-only); the
// file is opened the same way, never followed, and checked on the handle
// it is read from: a disk file, no link of any kind, one hard link, owned
// by the caller (winfile.CheckFile), with no ACE for anyone but the
// caller, SYSTEM and Administrators (winfile.Private). A new one is made
// with FILE_CREATE (never over an existing name) and an owner-only
// protected DACL (winfile.OwnerOnly).
func loadToken(path string) (string, error) {
	user, err := winfile.User()
	if err != nil {
		return "", fmt.Errorf("token file %s: the caller's SID: %w", path, err)
	}
	w := trustedWalk(user)
	h, err := w.Open(path, windows.FILE_READ_DATA|windows.FILE_READ_ATTRIBUTES|windows.READ_CONTROL|windows.SYNCHRONIZE,
		windows.FILE_OPEN, windows.FILE_NON_DIRECTORY_FILE, nil)
	switch {
	case errors.Is(err, windows.ERROR_FILE_NOT_FOUND):
		return createToken(w, path, user)
	case errors.Is(err, windows.STATUS_FILE_IS_A_DIRECTORY):
		return "", fmt.Errorf("token file %s is not a regular file (a directory): give --token-file a file", path)
	case err != nil:
		return "", fmt.Errorf("token file %s: %w", path, walkErr(err, user, "give --token-file a path without symbolic links or junctions", "they could replace the token", ", or give another --token-file"))
	}
	f := os.NewFile(uintptr(h), path)
	defer f.Close()
	if err := winfile.CheckFile(h, user); err != nil {
		return "", fmt.Errorf("token file %s %v: remove it (a new token is made), or give --token-file the file itself", path, err)
	}
	if err := winfile.Private(h, user); err != nil {
		return "", fmt.Errorf("token file %s %v: others could read or change the token (%s)", path, err, icaclsFix(path, user, err, false))
	}
	return readToken(f, "token file "+path, ": remove it (a new token is made) or write one into it")
}

// createToken makes the token file through w: never over an existing
// name (FILE_CREATE), owner-only.
func createToken(w winfile.Walk, path string, user *windows.SID) (string, error) {
	tok := newToken()
	sd, err := winfile.OwnerOnly(user)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	h, err := w.Open(path, windows.FILE_WRITE_DATA|windows.SYNCHRONIZE, windows.FILE_CREATE, windows.FILE_NON_DIRECTORY_FILE, sd)
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(h), path)
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("token file: %w", err)
	}
	return tok, f.Close()
}

// readClientToken reads the bearer token a client sends. As ssh does for
// a private key, a token file that others may read is refused
// (winfile.Private: whoever reads it controls every sandbox); it may be a
// link (secret mounts are), followed as os.Open follows it.
func readClientToken(path string) (string, error) {
	if winfile.IsDevicePath(path) { // a pipe's server would be connected to before the check
		return "", fmt.Errorf("--token-file %s %v: give the token file's path", path, winfile.ErrDevice)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("--token-file %s is not a regular file", path)
	}
	user, err := winfile.User()
	if err != nil {
		return "", fmt.Errorf("--token-file: the caller's SID: %w", err)
	}
	if err := winfile.Private(windows.Handle(f.Fd()), user); err != nil {
		return "", fmt.Errorf("--token-file %s %v: others could read the token, which controls every sandbox of the gateway (%s)", path, err, icaclsFix(path, user, err, false))
	}
	return readToken(f, "--token-file "+path, "")
}

// trustedWalk walks to a path the gateway trusts: a missing directory is
// made owner-only, an existing one must pass winfile.TrustedDir (an
// *untrustedDir when not).
func trustedWalk(user *windows.SID) winfile.Walk {
	sd, err := winfile.OwnerOnlyDir(user)
	if err != nil {
		// The descriptor is built from the SID's own string: it parses.
		panic(err)
	}
	return winfile.Walk{Mkdir: sd, Check: func(d winfile.Dir) error {
		if d.Created {
			return nil
		}
		if err := winfile.TrustedDir(d.Handle, user, d.Last); err != nil {
			return &untrustedDir{dir: d.Path, err: err}
		}
		return nil
	}}
}

// untrustedDir is a directory on a trusted path that another user could
// control; err completes "DIR ...".
type untrustedDir struct {
	dir string
	err error
}

func (u *untrustedDir) Error() string { return u.dir + " " + u.err.Error() }

// walkErr says what is wrong with a trustedWalk's error and how to fix
// it: onLink when a component is a link; when another user may control a
// directory, so (what they could do) and or (another way out).
func walkErr(err error, user *windows.SID, onLink, so, or string) error {
	var ce *winfile.ComponentError
	var u *untrustedDir
	var ge *winfile.GrantError
	switch {
	case errors.As(err, &ce) && !ce.NotDir:
		return fmt.Errorf("%v: %s", ce, onLink)
	case errors.As(err, &u) && errors.As(u.err, &ge):
		return fmt.Errorf("%v, so %s: keep it in directories only you, SYSTEM and Administrators can change (%s)%s", u, so, icaclsFix(u.dir, user, ge, true), or)
	case errors.As(err, &u):
		return fmt.Errorf("%v, so %s: keep it in directories of your own, SYSTEM's or Administrators'%s", u, so, or)
	}
	return err
}

// icaclsFix is the icacls command that takes the rights err names (a
// *winfile.GrantError, else a missing DACL) away from path, a directory
// when dir: an explicit ACE is removed, inherited ones are cut off and
// the caller given full control.
func icaclsFix(path string, user *windows.SID, err error, dir bool) string {
	var ge *winfile.GrantError
	if errors.As(err, &ge) && !ge.Inherited {
		return fmt.Sprintf(`icacls "%s" /remove:g *%s`, path, ge.SID)
	}
	perm := "F"
	if dir {
		perm = "(OI)(CI)F"
	}
	return fmt.Sprintf(`icacls "%s" /inheritance:r /grant:r *%s:%s`, path, user, perm)
}
