//go:build linux

// Package docker is the docker provider: the policy enforced by a Docker
// Engine container (API ≥ 1.40, through the moby client module) with
// secure defaults — a non-root user, a read-only root filesystem, every
// capability dropped, no-new-privileges, moby's default seccomp profile,
// cgroup limits, no host namespaces, no Docker socket — plus a second
// layer applied by Corral's own static binary inside the container:
// Landlock and Corral's seccomp filter, applied by a shim before every
// command, and an init (PID 1) that forwards the egress proxy and dies
// with the supervisor.
//
// What Docker cannot do is reported in the loss report (see Map); the
// containers carry labels so that Sweep (and `corral gc`) removes those
// whose supervisor is gone.
package docker

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/landlock"
	"github.com/corral-sandbox/corral/policy"
	"github.com/corral-sandbox/corral/provider"
)

// Name is the provider's name.
const Name = "docker"

// Provider is the docker provider. Use New.
type Provider struct {
	once sync.Once
	host hostFacts

	mu     sync.Mutex
	images map[string]map[string]imagePath // by image id: where the trust files' paths lead (imagePaths)
}

// hostFacts is what Probe found, read once.
type hostFacts struct {
	cli         *client.Client
	err         error // why the daemon cannot be used
	version     string
	apiVersion  string
	cgroup      string // driver and version, e.g. "cgroupfs v1"
	runtimes    []string
	seccomp     bool // the daemon supports seccomp profiles
	userns      bool // the daemon remaps users (userns-remap)
	rootless    bool
	landlockABI int
	dataRoot    string // the daemon's data root (DockerRootDir), e.g. /var/lib/docker
	osName      string // the daemon's OperatingSystem ("Docker Desktop" for Docker Desktop's VM)
	bin         string // the corral binary mounted into containers
	binErr      error  // why it cannot be (not static)
}

// New returns the docker provider. The daemon is DOCKER_HOST, else the
// local socket /var/run/docker.sock (Docker CLI contexts are not read).
func New() *Provider { return &Provider{} }

func (p *Provider) Name() string { return Name }

func (p *Provider) facts() *hostFacts {
	p.once.Do(func() {
		h := &p.host
		h.landlockABI = landlock.ABI()
		h.bin, h.binErr = staticSelf()
		if host := os.Getenv("DOCKER_HOST"); host != "" && !strings.HasPrefix(host, "unix://") {
			h.err = fmt.Errorf("DOCKER_HOST=%s is not a local unix socket: the provider bind-mounts host paths, which needs the daemon on this machine", host)
			return
		}
		cli, err := client.New(client.FromEnv)
		if err != nil {
			h.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
			h.err = fmt.Errorf("daemon not reachable: %w", err)
			return
		}
		v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
		if err != nil {
			h.err = fmt.Errorf("daemon version: %w", err)
			return
		}
		info, err := cli.Info(ctx, client.InfoOptions{})
		if err != nil {
			h.err = fmt.Errorf("daemon info: %w", err)
			return
		}
		h.cli, h.version, h.apiVersion = cli, v.Version, v.APIVersion
		h.cgroup = info.Info.CgroupDriver + " v" + info.Info.CgroupVersion
		h.dataRoot = info.Info.DockerRootDir
		h.osName = info.Info.OperatingSystem
		for name := range info.Info.Runtimes {
			h.runtimes = append(h.runtimes, name)
		}
		slices.Sort(h.runtimes)
		for _, o := range info.Info.SecurityOptions {
			switch {
			case strings.HasPrefix(o, "name=seccomp"):
				h.seccomp = true
			case o == "name=userns":
				h.userns = true
			case o == "name=rootless":
				h.rootless = true
			}
		}
		if h.userns || h.rootless {
			// Uids inside are not host uids: the workload's identity,
			// the ownership of bound trees and the verification from
			// outside would all be wrong.
			h.err = fmt.Errorf("the daemon remaps users (userns-remap or rootless): not supported; use a daemon without it")
		}
	})
	return &p.host
}

// staticSelf returns this executable's path when it is a static binary
// (no ELF interpreter): it runs inside any image. A dynamically linked
// corral (built with cgo) cannot.
func staticSelf() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", err
	}
	f, err := elf.Open(exe)
	if err != nil {
		return exe, fmt.Errorf("%s: %w", exe, err)
	}
	defer f.Close()
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_INTERP {
			return exe, fmt.Errorf("%s is dynamically linked: build corral with CGO_ENABLED=0 so it can run inside any image", exe)
		}
	}
	return exe, nil
}

// Probe inspects the daemon. It never fails.
func (p *Provider) Probe(ctx context.Context) provider.HostReport {
	h := p.facts()
	r := provider.HostReport{Provider: Name, Available: h.err == nil && h.binErr == nil, Facts: map[string]string{
		"landlock_abi": strconv.Itoa(h.landlockABI),
	}}
	if h.err != nil {
		r.Reason = h.err.Error()
		r.Fixes = []string{"start the Docker daemon (dockerd) and make its socket reachable: run as root or as a member of the docker group"}
		if host := os.Getenv("DOCKER_HOST"); host != "" && !strings.HasPrefix(host, "unix://") {
			r.Fixes = []string{"unset DOCKER_HOST (or point it at the local daemon's unix socket)"}
		}
		return r
	}
	if h.binErr != nil { // corral itself is every container's init
		r.Reason = h.binErr.Error()
		r.Fixes = []string{"CGO_ENABLED=0 go build ./cmd/corral"}
	}
	r.Facts["version"] = h.version
	r.Facts["api_version"] = h.apiVersion
	r.Facts["cgroup"] = h.cgroup
	r.Facts["runtimes"] = strings.Join(h.runtimes, ",")
	r.Facts["seccomp"] = strconv.FormatBool(h.seccomp)
	r.Facts["userns_remap"] = strconv.FormatBool(h.userns)
	r.Facts["rootless"] = strconv.FormatBool(h.rootless)
	r.Facts["corral_binary"] = h.bin
	if h.binErr != nil {
		r.Facts["corral_binary"] = h.binErr.Error()
	}
	return r
}

// Capabilities describes the provider on this host.
func (p *Provider) Capabilities(ctx context.Context) provider.Capabilities {
	return provider.Capabilities{
		Version:          provider.CapabilitiesVersion,
		Provider:         Name,
		FilesystemGrants: true,
		FilesystemDeny:   true,
		NetworkModes:     []policy.NetworkMode{policy.NetworkNone, policy.NetworkProxy, policy.NetworkHost},
		ResourceLimits:   []string{"memory", "pids", "cpu", "nofile", "timeout"},
		SessionLifetimes: []provider.SessionLifetime{provider.LifetimePerRun, provider.LifetimePersistent},
		// Grants other than the system directories (which the image
		// serves) appear at their host paths.
		HostPathProjection:      true,
		ReportsRuntimeReadiness: true,
		Layers:                  p.facts().layerAvailability(nil),
	}
}

// layerAvailability says, per layer, whether it can be applied here.
func (h *hostFacts) layerAvailability(req policy.Layers) []provider.LayerStatus {
	var out []provider.LayerStatus
	for _, l := range policy.AllLayers {
		st := provider.LayerStatus{Layer: l, Required: req.Requirement(l), State: provider.LayerActive}
		switch {
		case h.err != nil:
			st.State, st.Detail = provider.LayerUnavailable, "docker: "+h.err.Error()
		case l == policy.LayerNamespaces:
			st.Detail = "container mount, pid, ipc, uts, net, cgroup namespaces (no user namespace)"
		case l == policy.LayerMounts:
			st.Detail = "read-only image root, bind mounts, tmpfs /tmp and home"
		case h.binErr != nil:
			st.State, st.Detail = provider.LayerUnavailable, h.binErr.Error()
		case l == policy.LayerLandlock:
			if h.landlockABI < 1 {
				st.State, st.Detail = provider.LayerUnavailable, "kernel has no Landlock (ABI 0)"
			} else {
				st.Detail = fmt.Sprintf("landlock ABI %d, applied by corral's shim inside", h.landlockABI)
			}
		case l == policy.LayerSeccomp:
			if !h.seccomp {
				st.State, st.Detail = provider.LayerUnavailable, "the daemon has no seccomp support"
			} else {
				st.Detail = "moby's default profile + corral's filter"
			}
		case l == policy.LayerCgroups:
			st.Detail = "docker " + h.cgroup
		}
		if st.State == provider.LayerUnavailable && st.Required == policy.Optional {
			st.State = provider.LayerSkipped
		}
		out = append(out, st)
	}
	return out
}
