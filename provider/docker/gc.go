//go:build linux

package docker

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

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

// Sweep removes Corral's containers (label LabelSandbox) whose supervisor
// is gone — its pid is not running, or runs a process with another start
// time — with their state dirs. Containers of live supervisors are left
// alone; an unprivileged caller sweeps only its own (those whose state dir
// is under its state base). It returns what it removed.
func Sweep(ctx context.Context) ([]Removed, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelSandbox)})
	if err != nil {
		return nil, fmt.Errorf("docker: list containers: %w", err)
	}
	var out []Removed
	for _, c := range list.Items {
		if os.Getuid() != 0 && !strings.HasPrefix(c.Labels[LabelState], stateBase()+"/") {
			continue // another user's: their corral may be hidden from us (hidepid)
		}
		alive, why := ownerAlive(c.Labels[LabelOwner])
		if alive {
			continue
		}
		r := Removed{Sandbox: c.Labels[LabelSandbox], ID: c.ID, State: string(c.State), Reason: why}
		if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			r.Error = err.Error()
		} else if dir := c.Labels[LabelState]; strings.HasPrefix(dir, stateBase()+"/corral-") {
			if err := removeState(dir); err != nil {
				r.Error = err.Error()
			}
		}
		out = append(out, r)
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
