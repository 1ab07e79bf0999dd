package isolation

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/corral-sandbox/corral/internal/procid"
	"github.com/corral-sandbox/corral/internal/rmtree"
	"github.com/corral-sandbox/corral/internal/safetar"
	"github.com/corral-sandbox/corral/internal/wintask"
	"github.com/corral-sandbox/corral/provider"
	"github.com/corral-sandbox/corral/provider/mxc"
	"github.com/corral-sandbox/corral/service"
)

// Check is one posture check made from the host, outside the session.
// Result is "pass", "fail", "unverified" (the host could not look) or
// "mock" (on the stand-in, which runs sessions as the caller: what MXC
// would show cannot be checked).
type Check struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Detail string `json:"detail"`
}

// Report is `corral service status`: what the host checked (Probe,
// Checks), what the session's supervisor says of itself (Session:
// the agent's to write, never evidence by itself), and what cannot be
// verified from the host.
type Report struct {
	Name       string         `json:"name"`
	Phase      Phase          `json:"phase"`
	Desired    string         `json:"desired,omitempty"`
	SandboxID  string         `json:"sandbox_id,omitempty"`
	AgentUser  string         `json:"agent_user,omitempty"`
	AgentSID   string         `json:"agent_sid,omitempty"`
	Command    []string       `json:"command,omitempty"`
	Session    *SessionStatus `json:"session,omitempty"`
	Probe      *Probe         `json:"probe,omitempty"`
	Checks     []Check        `json:"checks,omitempty"`
	Boundary   string         `json:"boundary"`
	Unverified []string       `json:"unverified"`
	Autostart  string         `json:"autostart_task,omitempty"`
	Warnings   []string       `json:"warnings,omitempty"`
	Mock       string         `json:"mock,omitempty"`
	Exported   time.Time      `json:"exported,omitzero"`
}

// Running reports whether the session's workload runs by the
// supervisor's account and the host's probe.
func (r *Report) Running() bool {
	return r.Session != nil && r.Session.State == StateRunning && (r.Probe == nil || r.Probe.OK)
}

// Failed reports whether a host-side check failed.
func (r *Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Result == "fail" {
			return true
		}
	}
	return false
}

// unverified is what no host-side check here covers.
var unverified = []string{
	"that the processes the session's status names are the gateway: status.json is the agent user's to write (their token user is checked; what they run is not)",
	"what the agent user can read or write on the host: isolation_session grants no filesystem rules, host ACLs decide",
	"egress: isolation_session runs with default-allow network and local network access; nothing filters it",
}

// Status reads the session's status from its supervisor, probes
// readiness from the host, and checks from outside that the supervisor
// and the workload run as the session's agent user, not as the caller.
func (m *Manager) Status(ctx context.Context, name string) (*Report, error) {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r := &Report{Name: rec.Name, Phase: rec.Phase, Desired: rec.Desired, SandboxID: rec.SandboxID, AgentUser: rec.AgentUser,
		AgentSID: rec.AgentSID, Boundary: Boundary, Unverified: unverified, Exported: rec.Exported}
	if m.Mock {
		r.Mock = MockNote
	}
	if rec.Start != nil {
		r.Command = rec.Start.Command
	}
	r.Autostart, r.Warnings = m.autostartWarnings(p, rec)
	if rec.Phase != PhaseReady {
		return r, nil
	}
	s, release, err := m.attach(ctx, p, rec)
	if err != nil {
		return r, err
	}
	defer release()
	st, err := m.sessionStatus(ctx, s, p, rec)
	if err != nil {
		r.Warnings = append(r.Warnings, "the session's status: "+err.Error())
		return r, nil
	}
	r.Session = st
	if st.State != StateRunning {
		return r, nil
	}
	if rec.Start != nil && (rec.Start.ReadyPort > 0 || rec.Start.ReadyHTTP != "") {
		pr := probe(ctx, rec.Start)
		r.Probe = &pr
	}
	r.Checks = append(r.Checks, m.identity("supervisor", st.Supervisor, rec), m.identity("workload", st.Workload, rec))
	return r, nil
}

// identity checks, from the host, that proc (named by the session's
// status: pid and start time) is alive and runs as the agent user.
func (m *Manager) identity(what string, proc Proc, rec *Record) Check {
	c := Check{Name: what + " identity"}
	if !proc.Alive() {
		c.Result, c.Detail = "fail", fmt.Sprintf("the %s the session names (pid %d) is not running", what, proc.PID)
		return c
	}
	user, err := procid.User(proc.PID)
	if err != nil {
		c.Result, c.Detail = "unverified", fmt.Sprintf("the token of pid %d cannot be read from here: %v", proc.PID, err)
		return c
	}
	me, _ := procid.User(os.Getpid())
	switch {
	case m.Mock:
		c.Result, c.Detail = "mock", fmt.Sprintf("pid %d runs as %s; the stand-in runs sessions as the caller, where MXC runs them as the agent user %s", proc.PID, user, rec.AgentSID)
	case rec.AgentSID != "" && user == rec.AgentSID && user != me:
		c.Result, c.Detail = "pass", fmt.Sprintf("pid %d runs as the agent user %s (%s)", proc.PID, rec.AgentUser, user)
	default:
		c.Result, c.Detail = "fail", fmt.Sprintf("pid %d runs as %s, not as the agent user %s", proc.PID, user, rec.AgentSID)
	}
	return c
}

func (m *Manager) autostartWarnings(p Paths, rec *Record) (string, []string) {
	if _, err := os.Lstat(p.Task()); err != nil {
		return "", nil
	}
	self, err := os.Executable()
	if err != nil {
		return p.Task(), []string{"autostart: " + err.Error()}
	}
	var ws []string
	for _, w := range wintask.Check(p.Task(), self, rec.AgentSID) {
		ws = append(ws, "autostart: "+w)
	}
	return p.Task(), ws
}

// Restart stops the workload and starts it with the recorded spec.
func (m *Manager) Restart(ctx context.Context, name string) (*SessionStatus, error) {
	if err := m.Stop(ctx, name); err != nil {
		return nil, err
	}
	return m.Start(ctx, name, nil)
}

// An export is a zstd-compressed POSIX tar (RFC 8878) holding, in order,
// corral-service.json (the manifest), policy.yaml, and home.tar: the
// home as the session packed it, checked by safetar's rules on the host
// before it was taken in.
const (
	manifestName = "corral-service.json"
	policyName   = "policy.yaml"
	homeName     = "home.tar"
	// maxSmall bounds the manifest and the policy an import reads,
	// maxDecoderMemory the zstd window (the encoder default is 8 MiB).
	maxSmall         = 1 << 20
	maxDecoderMemory = 256 << 20
)

type manifest struct {
	Version  int        `json:"version"`
	Kind     string     `json:"kind"`
	Name     string     `json:"name"`
	Exported time.Time  `json:"exported"`
	Corral   string     `json:"corral_version"`
	Start    *StartSpec `json:"start,omitempty"`
}

const manifestKind = "corral-service-isolation-session"

// Export writes session name's policy, start spec and home to w. The
// session's workload must be stopped. The home is packed inside the
// session into a fresh staging directory, copied to the host once,
// bounded, and checked there by safetar's rules before any of it goes
// into the export: the session wrote it, so it is untrusted.
func (m *Manager) Export(ctx context.Context, name string, w io.Writer) (safetar.Stats, error) {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return safetar.Stats{}, err
	}
	defer unlock()
	pol, err := os.ReadFile(p.Policy())
	if err != nil {
		return safetar.Stats{}, err
	}
	home, err := os.CreateTemp(p.Dir, "export-*.tar")
	if err != nil {
		return safetar.Stats{}, err
	}
	defer os.Remove(home.Name())
	defer home.Close()
	var skipped []string
	if rec.corral() != "" {
		if skipped, err = m.homeOut(ctx, p, rec, home); err != nil {
			return safetar.Stats{}, err
		}
	} else if err := tar.NewWriter(home).Close(); err != nil { // never started: an empty home
		return safetar.Stats{}, err
	}
	if _, err := home.Seek(0, io.SeekStart); err != nil {
		return safetar.Stats{}, err
	}
	st, err := safetar.Check(home, safetar.Limits{})
	if err != nil {
		return st, badArchive(err)
	}
	st.Skipped = skipped
	now := time.Now().UTC()
	man, _ := json.MarshalIndent(manifest{Version: 1, Kind: manifestKind, Name: rec.Name, Exported: now, Corral: m.Version, Start: rec.Start}, "", "  ")
	zw, err := zstd.NewWriter(w)
	if err != nil {
		return st, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		data []byte
	}{{manifestName, man}, {policyName, pol}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o600, Size: int64(len(f.data)), ModTime: now, Format: tar.FormatPAX}); err != nil {
			return st, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return st, err
		}
	}
	size, _ := home.Seek(0, io.SeekEnd)
	if _, err := home.Seek(0, io.SeekStart); err != nil {
		return st, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: homeName, Mode: 0o600, Size: size, ModTime: now, Format: tar.FormatPAX}); err != nil {
		return st, err
	}
	if _, err := io.CopyN(tw, home, size); err != nil {
		return st, err
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	if err := zw.Close(); err != nil {
		return st, err
	}
	rec.Exported = now
	return st, rec.Save()
}

// maxHomeArchive bounds the home archive copied out of a session: the
// most safetar lets an archive hold, with room for its headers.
const maxHomeArchive = safetar.DefaultMaxTotalBytes + 2<<30

// homeOut has the session pack its home into a fresh staging directory
// and copies the archive into dst: one read, through os.Root (no link
// the agent planted is followed), at most maxHomeArchive bytes. skipped
// is what the session says it left out (its word: for the operator).
func (m *Manager) homeOut(ctx context.Context, p Paths, rec *Record, dst io.Writer) (skipped []string, err error) {
	s, release, err := m.attach(ctx, p, rec)
	if err != nil {
		return nil, err
	}
	defer release()
	dir, root, cleanup, err := stage(rec)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	code, out, err := m.inSession(ctx, s, p, rec.corral(), []string{"export", "--out", filepath.Join(dir, homeName)}, maxStatus)
	if code == exitRunning {
		return nil, provider.Errorf(provider.CodeStale, "service %s is running: stop it first, so the export is consistent (corral service stop %s)", rec.Name, rec.Name)
	}
	if err != nil || code != 0 {
		return nil, provider.Errorf(provider.CodeInternal, "the in-session export exited %d: %v", code, err)
	}
	f, err := openRegular(root, homeName)
	if err != nil {
		return nil, badArchive(err)
	}
	defer f.Close()
	n, err := io.Copy(dst, io.LimitReader(f, maxHomeArchive+1))
	if err == nil && n > maxHomeArchive {
		err = fmt.Errorf("larger than %d bytes", int64(maxHomeArchive))
	}
	if err != nil {
		return nil, badArchive(err)
	}
	var said safetar.Stats
	if json.Unmarshal(out, &said) == nil && len(said.Skipped) <= 100 {
		skipped = said.Skipped
	}
	return skipped, nil
}

// readExport reads an export's manifest and policy and leaves tr at its
// home archive, whose entry it returns. Everything in it is untrusted:
// sizes are bounded, the start spec validated, the names fixed.
func readExport(tr *tar.Reader) (*manifest, []byte, *tar.Header, error) {
	var man manifest
	var pol []byte
	for _, want := range []string{manifestName, policyName, homeName} {
		h, err := tr.Next()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("not a corral service export: want %s: %v", want, err)
		}
		if h.Name != want || (h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeRegA) {
			return nil, nil, nil, fmt.Errorf("not a corral service export: want the file %s, got %q", want, h.Name)
		}
		if want == homeName {
			return &man, pol, h, nil
		}
		if h.Size > maxSmall {
			return nil, nil, nil, fmt.Errorf("%s: %d bytes, more than %d", want, h.Size, maxSmall)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", want, err)
		}
		if want == policyName {
			pol = b
			continue
		}
		if err := json.Unmarshal(b, &man); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", want, err)
		}
		if man.Version != 1 || man.Kind != manifestKind {
			return nil, nil, nil, fmt.Errorf("%s: kind %q version %d: this corral reads %s version 1 (an export of corral service on Linux is imported there)", want, man.Kind, man.Version, manifestKind)
		}
		if man.Start != nil {
			if err := man.Start.Validate(); err != nil {
				return nil, nil, nil, fmt.Errorf("the export's %w", err)
			}
		}
	}
	panic("unreachable")
}

// Import provisions session name (the export's own when empty) from the
// export read from r: its policy, its start spec, and its home, which is
// checked by safetar's rules on the host first, then staged into the new
// session and unpacked there by the in-session corral. A failure after
// provision deprovisions the new session again.
func (m *Manager) Import(ctx context.Context, name string, r io.Reader) (*Record, provider.LossReport, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(maxDecoderMemory))
	if err != nil {
		return nil, nil, provider.Wrap(provider.CodePolicyRejected, "import", err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	man, pol, hh, err := readExport(tr)
	if err != nil {
		return nil, nil, provider.Wrap(provider.CodePolicyRejected, "import", err)
	}
	if name == "" {
		name = man.Name
	}
	if _, err := m.paths(name); err != nil {
		return nil, nil, err
	}
	if hh.Size > maxHomeArchive {
		return nil, nil, provider.Errorf(provider.CodePolicyRejected, "import: %s is %d bytes, more than %d", homeName, hh.Size, int64(maxHomeArchive))
	}
	// The home goes to a host file first, checked whole before the
	// session is made.
	tmpDir, err := os.MkdirTemp("", "corral-import-*")
	if err != nil {
		return nil, nil, err
	}
	defer rmtree.RemoveAll(tmpDir)
	homePath, polPath := filepath.Join(tmpDir, homeName), filepath.Join(tmpDir, policyName)
	if err := os.WriteFile(polPath, pol, 0o600); err != nil {
		return nil, nil, err
	}
	hf, err := os.OpenFile(homePath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer hf.Close()
	if _, err := io.Copy(hf, tr); err != nil {
		return nil, nil, provider.Wrap(provider.CodePolicyRejected, "import: "+homeName, err)
	}
	if _, err := hf.Seek(0, io.SeekStart); err != nil {
		return nil, nil, err
	}
	if _, err := safetar.Check(hf, safetar.Limits{}); err != nil {
		return nil, nil, provider.Wrap(provider.CodePolicyRejected, "import: "+homeName+" refused", err)
	}
	rec, loss, err := m.Provision(ctx, name, polPath)
	if err != nil {
		return nil, loss, err
	}
	fail := func(err error) (*Record, provider.LossReport, error) {
		if derr := m.Deprovision(context.WithoutCancel(ctx), name, true); derr != nil {
			err = fmt.Errorf("%w; undoing the provision failed too: %v", err, derr)
		}
		return nil, loss, err
	}
	if _, err := hf.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	if err := m.homeIn(ctx, name, hf, man.Start); err != nil {
		return fail(err)
	}
	p, _ := m.paths(name)
	rec, err = LoadRecord(p)
	return rec, loss, err
}

// homeIn stages corral and the home archive into session name and has
// the staged corral unpack the home into the (fresh) profile.
func (m *Manager) homeIn(ctx context.Context, name string, home io.Reader, start *StartSpec) error {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return err
	}
	defer unlock()
	rec.Start = start
	if err := rec.Save(); err != nil {
		return err
	}
	s, release, err := m.attach(ctx, p, rec)
	if err != nil {
		return err
	}
	defer release()
	dir, root, cleanup, err := stage(rec)
	if err != nil {
		return err
	}
	defer cleanup()
	if _, err := stageCorral(root); err != nil {
		return err
	}
	if _, err := writeStaged(root, homeName, func(w io.Writer) error { _, err := io.Copy(w, home); return err }); err != nil {
		return err
	}
	code, _, err := m.inSession(ctx, s, p, filepath.Join(dir, stagedCorral), []string{"import", "--from", filepath.Join(dir, homeName)}, maxStatus)
	if err != nil || code != 0 {
		return provider.Errorf(provider.CodeProvisionFailed, "the in-session import exited %d: %v", code, err)
	}
	return nil
}

// Deprovision removes session name: its workload stopped, the MXC
// session stopped and deprovisioned (MXC removes the agent user, its
// profile and the staging directory), the autostart task unregistered,
// the session directory removed. It is refused unless the home was
// exported after the last start, or force is set: the home is the
// gateway's memory, pairing and sessions. The phase is recorded first, so
// a crash midway is finished by reconcile.
func (m *Manager) Deprovision(ctx context.Context, name string, force bool) error {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return err
	}
	defer unlock()
	if !force && rec.Phase == PhaseReady && !rec.LastStart.IsZero() && rec.Exported.Before(rec.LastStart) {
		return provider.Errorf(provider.CodeStale, "service %s has state that was never exported since its last start (%s): corral service export %s -o FILE first, or --force to discard it", name, rec.LastStart.Format(time.RFC3339), name)
	}
	return m.deprovisionLocked(ctx, p, rec, unlock, force)
}

// deprovisionLocked removes the session under its lock, which it
// releases (unlock) to remove the lock file last.
//
// The stop is the agent's to answer: with force (and in reconcile) one
// that fails does not stop the removal, so that a workload cannot keep
// its session by refusing to stop.
func (m *Manager) deprovisionLocked(ctx context.Context, p Paths, rec *Record, unlock func(), force bool) error {
	named := rec.Phase != PhaseProvisioning // a provision that finished named its session
	rec.Phase = PhaseDeprovisioning
	if err := rec.Save(); err != nil {
		return err
	}
	fault("deprovision-after-intent")
	if _, err := os.Lstat(p.Task()); err == nil {
		if err := wintask.Unregister(ctx, rec.Name); err != nil && !errors.Is(err, wintask.ErrNotWindows) {
			return provider.Wrap(provider.CodeStopFailed, "autostart task", err)
		}
	}
	// MXC documents no process ending at deprovision (the stand-in ends
	// none): the gateway is stopped first, and a stop that fails on a
	// session still there stops the removal.
	if named && rec.corral() != "" {
		if err := m.stopLocked(ctx, p, rec); err != nil && provider.CodeOf(err) != provider.CodeNotFound && !force {
			return fmt.Errorf("stopping the gateway before the session is removed: %w (--force removes the session anyway)", err)
		}
	}
	if err := m.destroy(ctx, p, rec); err != nil {
		return err
	}
	return removeDir(p, unlock)
}

// destroy removes the MXC session of rec, whatever its phase: the mxc
// provider's Destroy on each of the session's records (an orphan among
// them is refused with its remedy).
func (m *Manager) destroy(ctx context.Context, p Paths, rec *Record) error {
	prov := m.Provider(p.MXCState())
	recs, err := prov.Records()
	if err != nil {
		return provider.Wrap(provider.CodeStopFailed, "", err)
	}
	var errs []error
	for _, r := range recs {
		if err := prov.Destroy(ctx, r.LocalID); err != nil {
			var oe *mxc.OrphanError
			if errors.As(err, &oe) {
				err = fmt.Errorf("%w: %s", err, m.orphans(p))
			}
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return provider.Wrap(provider.CodeStopFailed, "deprovision "+rec.Name, err)
	}
	return nil
}

// Summary is one line of `corral service list`.
type Summary struct {
	Name      string `json:"name"`
	Phase     Phase  `json:"phase"`
	Desired   string `json:"desired,omitempty"`
	SandboxID string `json:"sandbox_id,omitempty"`
	AgentUser string `json:"agent_user,omitempty"`
	Error     string `json:"error,omitempty"`
}

// List reads every session's record under Base (no session is
// contacted).
func (m *Manager) List() ([]Summary, error) {
	ents, err := os.ReadDir(m.Base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, e := range ents {
		if !e.IsDir() || service.ValidName(e.Name()) != nil {
			continue
		}
		rec, err := LoadRecord(PathsOf(m.Base, e.Name()))
		if err != nil {
			out = append(out, Summary{Name: e.Name(), Error: err.Error()})
			continue
		}
		out = append(out, Summary{Name: rec.Name, Phase: rec.Phase, Desired: rec.Desired, SandboxID: rec.SandboxID, AgentUser: rec.AgentUser})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Action is what reconcile did, or would do, for one session.
type Action struct {
	Name   string `json:"name"`
	Action string `json:"action"` // "ok", "finished", "undone", "lost", "orphan", "failed"
	Detail string `json:"detail"`
	// Remedy is the operator's command, for an orphan or a lost session.
	Remedy string `json:"remedy,omitempty"`
}

// Reconcile looks at every session record: a provision that died is
// undone when the mxc provider names what it made, and listed as an
// orphan (with the remedy) when it may have made an agent user nothing
// names; a deprovision that died is finished; a ready session MXC no
// longer has is reported lost. dryRun only reports.
func (m *Manager) Reconcile(ctx context.Context, dryRun bool) ([]Action, error) {
	list, err := m.List()
	if err != nil {
		return nil, err
	}
	var out []Action
	for _, sm := range list {
		out = append(out, m.reconcileOne(ctx, sm.Name, dryRun))
	}
	return out, nil
}

func (m *Manager) reconcileOne(ctx context.Context, name string, dryRun bool) Action {
	a := Action{Name: name}
	p, rec, unlock, err := m.open(name)
	if err != nil {
		a.Action, a.Detail = "failed", err.Error()
		return a
	}
	defer unlock()
	if orphans := m.orphans(p); len(orphans) > 0 {
		a.Action, a.Detail = "orphan", orphans[0]
		a.Remedy = "remove the agent user by hand if MXC made one, then: corral service reconcile --forget " + name
		return a
	}
	switch rec.Phase {
	case PhaseReady:
		_, release, err := m.attach(ctx, p, rec)
		if provider.CodeOf(err) == provider.CodeNotFound {
			a.Action, a.Detail = "lost", "MXC no longer has the session "+rec.SandboxID+": "+err.Error()
			a.Remedy = "corral service deprovision --force " + name
			return a
		}
		if err != nil {
			a.Action, a.Detail = "failed", err.Error()
			return a
		}
		release()
		a.Action, a.Detail = "ok", "session "+rec.SandboxID+" is there"
		return a
	case PhaseProvisioning, PhaseDeprovisioning:
		verb := map[Phase]string{PhaseProvisioning: "undone", PhaseDeprovisioning: "finished"}[rec.Phase]
		a.Action, a.Detail = verb, fmt.Sprintf("an interrupted %s: the MXC session and %s removed", rec.Phase, p.Dir)
		if dryRun {
			a.Action = "would be " + verb
			return a
		}
		if err := m.deprovisionLocked(ctx, p, rec, unlock, true); err != nil {
			a.Action, a.Detail = "failed", err.Error()
		}
		return a
	}
	a.Action, a.Detail = "failed", fmt.Sprintf("unknown phase %q", rec.Phase)
	return a
}

// Forget removes session name's record and its mxc orphan records, for
// after the operator removed what the orphan may have made: the one way
// an orphan record goes, never automatic.
func (m *Manager) Forget(name string) error {
	p, rec, unlock, err := m.open(name)
	if err != nil {
		return err
	}
	defer unlock()
	if rec.Phase == PhaseReady && len(m.orphans(p)) == 0 {
		return provider.Errorf(provider.CodeStale, "service %s is provisioned and names its session: corral service deprovision %s", name, name)
	}
	return removeDir(p, unlock)
}

// Autostart enables (or disables) the logon task that runs exe with
// `service start NAME` as the caller (userSID) at each logon.
func (m *Manager) Autostart(ctx context.Context, name, exe, userSID string, enable bool) (string, error) {
	p, _, unlock, err := m.open(name)
	if err != nil {
		return "", err
	}
	defer unlock()
	if !enable {
		if err := wintask.Unregister(ctx, name); err != nil {
			return "", err
		}
		if err := os.Remove(p.Task()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		return p.Task(), nil
	}
	x, err := wintask.Task{Name: name, Exe: exe, Args: []string{"service", "start", name}, UserID: userSID}.XML()
	if err != nil {
		return "", provider.Wrap(provider.CodePolicyRejected, "autostart", err)
	}
	if err := wintask.Write(p.Task(), x); err != nil {
		return "", err
	}
	if err := wintask.Register(ctx, name, p.Task()); err != nil {
		os.Remove(p.Task())
		return "", err
	}
	return p.Task(), nil
}
