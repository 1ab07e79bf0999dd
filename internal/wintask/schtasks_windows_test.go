//go:build windows

package wintask

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/corral-sandbox/corral/internal/wine"
)

// registered reports whether the task of name is registered: under Wine
// by its file in Task Scheduler's store (Wine's schtasks /Query prints
// nothing and exits 0 whatever the name); on Windows by schtasks /Query,
// since the store (System32\Tasks) is for administrators only. It returns
// the stored definition too under Wine (UTF-8 there, or UTF-16LE).
func registered(t *testing.T, name string) (bool, string) {
	t.Helper()
	sys, err := windows.GetSystemDirectory()
	if err != nil {
		t.Fatal(err)
	}
	if wine.Detected() {
		b, err := os.ReadFile(filepath.Join(sys, "Tasks", "Corral", "corral-service-"+name))
		if err != nil {
			return false, ""
		}
		if text, ok := bytes.CutPrefix(b, []byte("\xef\xbb\xbf")); ok { // Wine stores UTF-8
			return true, string(text)
		}
		return true, decode(t, b)
	}
	return exec.Command(filepath.Join(sys, "schtasks.exe"), "/Query", "/TN", TaskName(name)).Run() == nil, ""
}

// Register registers the definition Write wrote and Unregister removes
// it; Unregister of a task that does not exist succeeds.
func TestRegisterUnregister(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sys, err := windows.GetSystemDirectory()
	if err != nil {
		t.Fatal(err)
	}
	name := "zz-wintask-test"
	task := Task{Name: name, Exe: filepath.Join(sys, "cmd.exe"), Args: []string{"/c", "exit", "0"}, UserID: me(t).String(),
		Description: "corral internal/wintask test: safe to delete"}
	b, err := task.XML()
	if err != nil {
		t.Fatal(err)
	}
	path := Path(t.TempDir(), name)
	if err := Write(path, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unregister(context.Background(), name) })
	if err := Register(ctx, name, path); err != nil {
		t.Fatal(err)
	}
	ok, stored := registered(t, name)
	if !ok {
		t.Fatalf("%s is not registered after Register", TaskName(name))
	}
	if wine.Detected() && !strings.Contains(stored, task.Description) {
		t.Errorf("the task stored is not the definition written:\n%s", stored)
	}
	if err := Unregister(ctx, name); err != nil {
		t.Fatal(err)
	}
	if ok, _ := registered(t, name); ok {
		t.Errorf("%s is still registered after Unregister", TaskName(name))
	}
	err = Unregister(ctx, name)
	if err != nil && wine.Detected() {
		wine.SkipArtifact(t, "schtasks /Delete of a task that does not exist exits 1 and prints nothing: "+err.Error())
	}
	if err != nil {
		t.Errorf("Unregister of a task that does not exist = %v, want success", err)
	}
}

// Register fails, with schtasks' output, on a definition schtasks cannot
// read, and refuses a bad name before running it.
func TestRegisterFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "bad.xml")
	if err := os.WriteFile(path, append([]byte{0xff, 0xfe}, bytes.Repeat([]byte{'<', 0}, 4)...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unregister(context.Background(), "zz-wintask-bad") })
	if err := Register(ctx, "zz-wintask-bad", path); err == nil || !strings.Contains(err.Error(), "schtasks /Create") {
		t.Errorf("Register of a malformed definition = %v, want schtasks' failure", err)
	}
	if err := Register(ctx, `x\..\y`, path); err == nil || !strings.Contains(err.Error(), "service name") {
		t.Errorf("Register of a bad name = %v", err)
	}
}
