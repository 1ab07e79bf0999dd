//go:build linux

package docker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/landlock"
	"github.com/corral-sandbox/corral/internal/seccomp"
	"github.com/corral-sandbox/corral/provider"
)

// The hidden subcommands corral runs as inside a container.
const (
	InitArg = "__docker-init" // PID 1: lifeline, egress forwarder, reaper
	ExecArg = "__docker-exec" // before every command: Landlock, seccomp, exec
)

// parseShimSpec decodes the spec argument of the init and the shim.
func parseShimSpec(args []string) (*ShimSpec, error) {
	if len(args) == 0 {
		return nil, errors.New("no spec argument")
	}
	var s ShimSpec
	if err := json.Unmarshal([]byte(args[0]), &s); err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	return &s, nil
}

// InitMain is corral's init inside the container (PID 1). It reports to
// the supervisor over ControlSocket, forwards 127.0.0.1:ProxyPort to the
// egress proxy (network proxy), forwards signals to every process inside,
// reaps orphans, and when the supervisor's end of ControlSocket closes —
// the supervisor ended, however — kills everything inside and exits, which
// ends the container. args is [SPEC-JSON]. It never returns.
func InitMain(args []string) {
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "corral init: "+format+"\n", args...)
		os.Exit(125)
	}
	spec, err := parseShimSpec(args)
	if err != nil {
		die("%v", err)
	}
	var ctl net.Conn
	for i := 0; ; i++ {
		if ctl, err = net.Dial("unix", ControlSocket); err == nil {
			break
		}
		if i == 50 {
			die("supervisor: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hello := initHello{Landlock: landlock.ABI(), Skipped: map[string]string{}}
	fault := func(layer string) error {
		if spec.FaultLayer == layer {
			return fmt.Errorf("fault injected (%s=%s)", provider.FaultEnv, layer)
		}
		return nil
	}
	// layer records a layer that could not be applied: an error when
	// required, else skipped.
	layer := func(name string, required bool, err error) {
		if err == nil || hello.Error != "" {
			return
		}
		if required {
			hello.Error, hello.Layer = err.Error(), name
		} else {
			hello.Skipped[name] = err.Error()
		}
	}
	if spec.ProxyPort != 0 {
		if err := forward(spec.ProxyPort, EgressSocket, false); err != nil {
			hello.Error = "egress forwarder: " + err.Error()
		}
	}
	if spec.ConsentPort != 0 && hello.Error == "" {
		if err := forward(spec.ConsentPort, ConsentSocket, true); err != nil {
			hello.Error = "consent forwarder: " + err.Error()
		}
	}
	if spec.Seccomp {
		err := fault("seccomp")
		if err == nil {
			err = seccomp.Install()
		}
		layer("seccomp", spec.SeccompRequired, err)
	}
	if spec.Landlock.Enabled {
		err := fault("landlock")
		if err == nil && hello.Landlock < 1 {
			err = errors.New("Landlock is not usable inside the container (ABI 0)")
		}
		layer("landlock", spec.Landlock.Required, err)
	}
	b, _ := json.Marshal(hello)
	if _, err := ctl.Write(append(b, '\n')); err != nil {
		os.Exit(125)
	}
	if hello.Error != "" {
		// Stay until the supervisor has read it (it checks who we are
		// by our pid, so we must still be here), then end the container.
		_, _ = io.Copy(io.Discard, ctl)
		os.Exit(125)
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGCHLD)
	go func() {
		for s := range sigs {
			if s == unix.SIGCHLD {
				for {
					pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
					if pid <= 0 || err != nil {
						break
					}
				}
				continue
			}
			_ = unix.Kill(-1, s.(syscall.Signal)) // every process inside but init
		}
	}()
	_, _ = io.Copy(io.Discard, ctl) // until the supervisor is gone
	if spec.Persistent {
		select {} // outlives it: its manager stops the container
	}
	_ = unix.Kill(-1, unix.SIGKILL)
	os.Exit(0)
}

// forward listens on 127.0.0.1:port in the container's network namespace
// and splices every connection to the supervisor's socket sock: the
// egress proxy on EgressSocket (the container's only way out), the
// consent channel on ConsentSocket. With tellPeer, each connection to the
// supervisor begins with the line peerLine of the client's address as
// the kernel gave it to accept(2), which the supervisor (it takes only
// init's connections) uses to find the client's process (ConsentPeer).
func forward(port int, sock string, tellPeer bool) error {
	l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				defer up.Close()
				if tellPeer {
					if _, err := io.WriteString(up, peerLine(c.RemoteAddr())); err != nil {
						return
					}
				}
				done := make(chan struct{})
				go func() {
					_, _ = io.Copy(up, c)
					_ = up.(*net.UnixConn).CloseWrite()
					close(done)
				}()
				_, _ = io.Copy(c, up)
				_ = c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return nil
}

// ExecMain is corral's shim before every command in the container: it
// applies Landlock (the grants) and corral's seccomp filter to itself,
// then executes the command, which inherits both. A required layer that
// cannot be applied stops it with status 125 and the layer's name; a
// command that is not found exits 127, one that cannot run 126 (the
// statuses of docker run and env(1)). args is [SPEC-JSON, "--", CMD...].
func ExecMain(args []string) {
	fail := func(code int, format string, a ...any) {
		fmt.Fprintf(os.Stderr, "corral: "+format+"\n", a...)
		os.Exit(code)
	}
	spec, err := parseShimSpec(args)
	if err != nil {
		fail(125, "start_failed: %v", err)
	}
	args = args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fail(125, "no command given")
	}
	// A faulted layer got this far only as optional (init refused it
	// when required): it is skipped, as Start reported.
	if spec.Landlock.Enabled && spec.FaultLayer != "landlock" {
		ll := spec.Landlock
		ll.RODirs, ll.ROFiles, ll.RWDirs, ll.RWFiles = existing(ll.RODirs), existing(ll.ROFiles), existing(ll.RWDirs), existing(ll.RWFiles)
		if _, err := landlock.Apply(ll); err != nil && ll.Required {
			fail(125, "start_failed: layer landlock: %v", err)
		}
	}
	if spec.Seccomp && spec.FaultLayer != "seccomp" {
		if err := seccomp.InstallWith(seccomp.Options{DenyUnixSockets: spec.DenyUnixSockets}); err != nil && spec.SeccompRequired {
			fail(125, "start_failed: layer seccomp: %v", err)
		}
	}
	if spec.Rows > 0 && spec.Cols > 0 { // our terminal, before the command looks at it
		_ = unix.IoctlSetWinsize(0, unix.TIOCSWINSZ, &unix.Winsize{Row: spec.Rows, Col: spec.Cols})
	}
	// The policy's environment and nothing else (not the image's ENV,
	// not what docker exec adds).
	os.Clearenv()
	for _, kv := range spec.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			_ = os.Setenv(k, v)
		}
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			fail(127, "%s: command not found", args[0])
		}
		fail(126, "%s: %v", args[0], err)
	}
	err = unix.Exec(path, args, spec.Env)
	code := 126
	if errors.Is(err, unix.ENOENT) {
		code = 127
	}
	fail(code, "%s: %v", args[0], err)
}

// existing keeps the paths that exist in the container (the image decides
// which system directories there are).
func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
