//go:build linux

package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Removed is one container Sweep removed (or failed to).
type Removed struct {
	Sandbox string `json:"sandbox"`
	ID      string `json:"container_id"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
	Error   string `json:"error,omitempty"`
}

// sandboxID is the shape of the ids Provision makes.
var sandboxID = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^corral-[0-9a-f]{12}$`) })

// Sweep removes Corral's containers whose supervisor is gone — its pid is
// not running, or runs a process with another start time, or the machine
// rebooted since — with their state dirs, and state dirs left without a
// container by a corral that died before creating one. A container is
// Corral's when its name is its io.corral.sandbox label, of the shape
// Provision makes, and it carries io.corral.version (labels alone can be
// inherited from an image). Containers of live supervisors are left alone;
// an unprivileged caller sweeps only its own (those whose state dir is
// under its state base). Only state dirs directly under this caller's
// state base are ever removed. It returns what it removed.
func (p *Provider) Sweep(ctx context.Context) ([]Removed, error) {
	h := p.facts()
	if h.err != nil {
		return nil, fmt.Errorf("docker: %w", h.err)
	}
	cli := h.cli
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelSandbox)})
	if err != nil {
		return nil, fmt.Errorf("docker: list containers: %w", err)
	}
	base := stateBase()
	var out []Removed
	seen := map[string]bool{}
	for _, c := range list.Items {
		id := c.Labels[LabelSandbox]
		if !sandboxID().MatchString(id) || !slices.Contains(c.Names, "/"+id) || c.Labels[LabelVersion] != labelSchemeVer {
			continue // not a container Corral made
		}
		if c.Labels[LabelManaged] != "" {
			continue // a persistent sandbox: its manager reconciles it
		}
		seen[id] = true
		ownDir := c.Labels[LabelState] == filepath.Join(base, id)
		if os.Getuid() != 0 && !ownDir {
			continue // another user's: their corral may be hidden from us (hidepid)
		}
		alive, why := ownerAlive(c.Labels[LabelOwner])
		if alive {
			continue
		}
		r := Removed{Sandbox: id, ID: c.ID, State: string(c.State), Reason: why}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			r.Error = err.Error()
		} else if ownDir {
			if err := removeState(filepath.Join(base, id)); err != nil {
				r.Error = err.Error()
			}
		}
		out = append(out, r)
	}
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || !sandboxID().MatchString(id) || seen[id] {
			continue
		}
		dir := filepath.Join(base, id)
		label, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue // being made right now, or not ours to judge
		}
		if alive, why := ownerAlive(string(label)); !alive {
			r := Removed{Sandbox: id, State: "no container", Reason: why}
			if err := removeState(dir); err != nil {
				r.Error = err.Error()
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// ownerAlive reads a LabelOwner value (ownerLabel) and reports whether
// that process may still run, with the reason when it does not. An owner
// in another pid namespace cannot be checked from here and counts as alive.
func ownerAlive(label string) (bool, string) {
	f := strings.Fields(label)
	if len(f) != 4 {
		return false, fmt.Sprintf("no valid owner label (%q)", label)
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return false, fmt.Sprintf("no valid owner label (%q)", label)
	}
	if f[2] != bootID() {
		return false, "its corral ran before the machine last booted"
	}
	if f[3] != pidNS() {
		return true, ""
	}
	now := startTime(pid)
	if now == 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			return true, "" // there, but its stat is hidden from us (hidepid): never remove a maybe-live sandbox
		}
		return false, fmt.Sprintf("its corral (pid %d) has ended", pid)
	}
	if now != start {
		return false, fmt.Sprintf("its corral (pid %d) has ended (the pid now belongs to another process)", pid)
	}
	return true, ""
}
