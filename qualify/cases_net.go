//go:build linux

package qualify

// Network and cross-sandbox cases: P05 network off, P07 cross-sandbox,
// P15 privileged unix sockets.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

func init() {
	Register(Case{ID: "P05", Title: "network off", Applies: linuxKernel, Run: runP05})
	Register(Case{ID: "P07", Title: "cross-sandbox", Applies: linuxKernel, Run: runP07})
	Register(Case{ID: "P15", Title: "privileged unix sockets", Applies: linuxKernel, Run: runP15})
}

// P05: net: none; UDP and TCP to port 53, TCP to an IPv4 and an IPv6
// address, to host loopback listeners, to a host abstract unix socket.
func runP05(ctx context.Context, e *Env) Result {
	hostWide.Lock()
	defer hostWide.Unlock()
	r := newResult()
	var ctrs []*counter
	defer func() {
		for _, c := range ctrs {
			c.Close()
		}
	}()
	add := func(network, addr string) *counter {
		c, err := listen(network, addr)
		if err != nil {
			e.Check(&r, "host: listen "+network+" "+addr, err.Error(), true, "")
			return nil
		}
		ctrs = append(ctrs, c)
		return c
	}
	// A DNS server on port 53 when it can be bound (root), else on any port.
	dnsIP := "127.0.0.53"
	dnsU := add("udp", dnsIP+":53")
	if dnsU == nil {
		dnsIP = "127.0.0.153"
		dnsU = add("udp", dnsIP+":53")
	}
	if dnsU == nil {
		dnsU = add("udp", dnsIP+":0")
	}
	var dnsT *counter
	if dnsU != nil {
		dnsT = add("tcp", dnsIP+":"+dnsU.port())
	}
	tcp4 := add("tcp", "127.0.0.1:0")
	tcp6 := add("tcp", "[::1]:0")
	udp4 := add("udp", "127.0.0.1:0")
	abs := add("unix", "@"+e.uniqueName())
	var tcpT, udpT, absT []string
	for _, c := range []*counter{dnsT, tcp4, tcp6} {
		if c != nil {
			tcpT = append(tcpT, c.Addr())
		}
	}
	// Documentation addresses (RFC 5737, RFC 3849): never routed.
	tcpT = append(tcpT, "192.0.2.1:80", "[2001:db8::1]:80", "192.0.2.1:53")
	for _, c := range []*counter{dnsU, udp4} {
		if c != nil {
			udpT = append(udpT, c.Addr())
		}
	}
	udpT = append(udpT, "192.0.2.1:53")
	if abs != nil {
		absT = append(absT, abs.Addr())
	}
	tok := newToken()
	ss := []step{
		{Label: "tcp", Args: append([]string{"connect", "tcp"}, tcpT...)},
		{Label: "udp", Args: append([]string{"connect", "udp"}, udpT...)},
	}
	if len(absT) > 0 {
		ss = append(ss, step{Label: "abstract", Args: append([]string{"connect", "abstract"}, absT...)})
	}
	if dnsU != nil {
		ss = append(ss, step{Label: "dns", Args: []string{"dns", tok + ".exfil.test", dnsU.Addr()}})
	}
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{Network: "none"}), Args: e.steps(ss...)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the probes with network: none", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	for _, k := range []string{"tcp", "abstract"} {
		if k == "abstract" && len(absT) == 0 {
			continue
		}
		for _, res := range s[k].Results {
			e.Check(&r, res.What, show(res), !res.OK, res.What+" succeeded with network: none")
		}
		if !s[k].reported() {
			mustFail(e, &r, k, s[k], "")
		}
	}
	// A UDP send can succeed locally; the listeners decide.
	for _, res := range s["udp"].Results {
		e.Check(&r, res.What+" (the listener decides)", show(res), true, "")
	}
	if dnsU != nil {
		for _, res := range s["dns"].Results {
			if strings.HasSuffix(res.What, " send") {
				e.Check(&r, res.What+" (the listener decides)", show(res), true, "")
				continue
			}
			e.Check(&r, res.What, show(res), !res.OK, res.What+" got an answer with network: none")
		}
	}
	settle()
	for _, c := range ctrs {
		e.Check(&r, "host: "+c.network+" listener "+c.Addr()+" saw", fmt.Sprintf("%d connections/datagrams", c.Count()), c.Count() == 0, "the host listener "+c.Addr()+" was reached from the sandbox")
	}
	return r
}

// P07: two sandboxes at once with different rw dirs; each lists
// processes, reads the other's files and connects to a socket in the
// other's dir.
func runP07(ctx context.Context, e *Env) Result {
	r := newResult()
	type box struct {
		name, dir, tok, mark string
		sock                 *counter
		out                  Outcome
		err                  error
	}
	boxes := []*box{{name: "A"}, {name: "B"}}
	for _, b := range boxes {
		b.dir = e.TempDir("p07-" + strings.ToLower(b.name))
		b.tok = newToken()
		b.mark = uniqueSeconds(3170)
		if err := writeHostFile(filepath.Join(b.dir, "secret"), b.tok, 0o644); err != nil {
			failNow(e, &r, "set up", err)
			return r
		}
		// A socket in the box's own dir, for its own (control) use.
		c, err := listen("unix", filepath.Join(b.dir, "sock"))
		if err != nil {
			failNow(e, &r, "listen unix in "+b.dir, err)
			return r
		}
		defer c.Close()
		b.sock = c
	}
	policy := e.policyFor(pol{})
	other := func(b *box) *box {
		if b == boxes[0] {
			return boxes[1]
		}
		return boxes[0]
	}
	wait := func(file string) string {
		return fmt.Sprintf("i=0; while [ ! -e %s ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done", file)
	}
	var wg sync.WaitGroup
	for _, b := range boxes {
		o := other(b)
		args := e.steps(
			step{Label: "setup", Shell: e.probeLine("sleep", "30", b.mark) + " >/dev/null & S=$!; touch ready; " + wait("go")},
			step{Label: "ps", Args: []string{"env"}},
			step{Label: "read other", Args: []string{"read", filepath.Join(o.dir, "secret")}},
			step{Label: "list other", Args: []string{"list", o.dir}},
			step{Label: "connect other", Args: []string{"connect", "unix", filepath.Join(o.dir, "sock")}},
			step{Label: "read own", Args: []string{"read", filepath.Join(b.dir, "secret")}},
			step{Label: "connect own", Args: []string{"connect", "unix", filepath.Join(b.dir, "sock")}},
			step{Label: "finish", Shell: "touch done; " + wait("end") + "; kill $S"},
		)
		wg.Add(1)
		go func(b *box) {
			defer wg.Done()
			b.out, b.err = e.Corral(ctx, Run{Policy: policy, Workdir: b.dir, Args: args, Timeout: 40 * time.Second})
		}(b)
	}
	// Both must be up at once: release them together, and let them end
	// only when both have probed.
	waitHost := func(name string) bool {
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if hostExists(filepath.Join(boxes[0].dir, name)) && hostExists(filepath.Join(boxes[1].dir, name)) {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	concurrent := waitHost("ready")
	both := len(e.ProcsWith(boxes[0].mark)) > 0 && len(e.ProcsWith(boxes[1].mark)) > 0
	for _, b := range boxes {
		_ = os.WriteFile(filepath.Join(b.dir, "go"), nil, 0o644)
	}
	probed := waitHost("done")
	for _, b := range boxes {
		_ = os.WriteFile(filepath.Join(b.dir, "end"), nil, 0o644)
	}
	wg.Wait()
	e.Check(&r, "start sandboxes A and B at once (rw dirs DA, DB); both running", fmt.Sprintf("both ready: %v; both workloads alive on the host: %v; both probed: %v", concurrent, both, probed), concurrent && both && probed, "the two sandboxes did not run concurrently, so the case proves nothing")
	for _, b := range boxes {
		o := other(b)
		if b.err != nil {
			failNow(e, &r, "sandbox "+b.name, b.err)
			continue
		}
		s := parseSteps(b.out)
		e.Check(&r, b.name+": run", brief(b.out), b.out.Code == 0 && s["end"].Ran, "sandbox "+b.name+" did not finish its probes")
		mustSucceed(e, &r, b.name+": control: read its own secret", s["read own"], "sandbox "+b.name+" cannot read its own dir: the probes are not meaningful")
		e.Check(&r, b.name+": control: connect to the socket in its own dir", s["connect own"].String(), true, "")
		mustFail(e, &r, b.name+": read "+o.name+"'s file", s["read other"], b.name+" read "+o.name+"'s file")
		mustFail(e, &r, b.name+": list "+o.name+"'s dir", s["list other"], b.name+" listed "+o.name+"'s dir")
		mustFail(e, &r, b.name+": connect to the socket in "+o.name+"'s dir", s["connect other"], b.name+" connected to "+o.name+"'s socket")
		ps := s["ps"]
		var pids string
		if pr, ok := find(ps.Results, "pids"); ok {
			pids = pr.Detail
		}
		sees := strings.Contains(ps.Text, o.mark) || strings.Contains(ps.Text, o.tok)
		e.Check(&r, b.name+": list processes (pids, cmdlines, environ)", "pids: "+pids, ps.reported() && pids != "" && !sees, b.name+" sees "+o.name+"'s processes")
		if !strings.Contains(ps.Text, b.mark) && ps.reported() {
			e.Check(&r, b.name+": control: its own marker process is in its list", "not found", false, b.name+"'s process listing does not even show its own processes: the check is not meaningful")
		}
		e.Check(&r, b.name+": "+o.name+"'s token not in the output", fmt.Sprint(len(leaked(b.out.Stdout+b.out.Stderr, o.tok)), " found"), len(leaked(b.out.Stdout+b.out.Stderr, o.tok)) == 0, o.name+"'s secret reached "+b.name)
	}
	settle()
	// Each socket may only have been reached by its own sandbox's control.
	for _, b := range boxes {
		own := 0
		if s := parseSteps(b.out)["connect own"]; s.anyOK() {
			own = 1
		}
		e.Check(&r, "host: the socket in "+b.name+"'s dir saw", fmt.Sprintf("%d connections (%d from %s's own control)", b.sock.Count(), own, b.name), b.sock.Count() <= own, "the socket in "+b.name+"'s dir was reached from the other sandbox")
	}
	for _, b := range boxes {
		if left := e.waitNoProcs(b.mark, 5*time.Second); len(left) > 0 {
			killProcs(left)
			e.Check(&r, "host: "+b.name+"'s processes gone", fmt.Sprint(left), false, "processes of sandbox "+b.name+" left behind")
		}
	}
	return r
}

// P15: a fake Docker API socket under /run, a session bus, sockets in the
// host's /tmp and in the caller's home; and one in a granted directory.
func runP15(ctx context.Context, e *Env) Result {
	r := newResult()
	abi := landlockABI()
	var ctrs []*counter
	var cleanup []string
	defer func() {
		for _, c := range ctrs {
			c.Close()
		}
		for _, p := range cleanup {
			os.RemoveAll(p)
		}
	}()
	type target struct {
		label, network, addr string
		c                    *counter
	}
	var targets []target
	add := func(label, network, addr string) {
		if network == "unix" && !strings.HasPrefix(addr, "@") {
			if err := os.MkdirAll(filepath.Dir(addr), 0o755); err != nil {
				e.Check(&r, "host: "+label+" at "+addr, err.Error(), true, "")
				return
			}
		}
		ln := network
		if ln == "abstract" {
			ln = "unix"
		}
		c, err := listen(ln, addr)
		if err != nil {
			e.Check(&r, "host: "+label+" at "+addr, "cannot create: "+err.Error(), true, "")
			return
		}
		ctrs = append(ctrs, c)
		targets = append(targets, target{label, network, addr, c})
	}
	m := e.uniqueName()
	// A fake Docker API under /run (root), where the host's services keep
	// their sockets.
	runDir := filepath.Join("/run", m)
	if err := os.Mkdir(runDir, 0o755); err == nil {
		cleanup = append(cleanup, runDir)
		add("fake Docker API under /run", "unix", filepath.Join(runDir, "docker.sock"))
	} else {
		e.Check(&r, "host: mkdir "+runDir, "cannot create (not root?): "+err.Error()+"; the /run socket is not tested", true, "")
	}
	// The user's session bus: the real one when there is one.
	if xdg := os.Getenv("XDG_RUNTIME_DIR"); xdg != "" {
		if _, err := os.Stat(filepath.Join(xdg, "bus")); err == nil {
			targets = append(targets, target{"the user's real session bus", "unix", filepath.Join(xdg, "bus"), nil})
		}
	}
	add("a session bus in the caller's home", "unix", filepath.Join(e.Home, ".cache", "bus"))
	add("an abstract session bus in the host's network namespace", "abstract", "@"+m+"-dbus")
	tmpSock := filepath.Join(os.TempDir(), m+".sock")
	cleanup = append(cleanup, tmpSock)
	add("a socket in the host's /tmp", "unix", tmpSock)
	var ss []step
	for i, t := range targets {
		network := t.network
		ss = append(ss, step{Label: fmt.Sprint("t", i), Args: []string{"connect", network, t.addr}})
	}
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{}), Args: e.steps(ss...)})
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	s := parseSteps(o)
	e.Check(&r, "run the probes (default grants)", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	for i, t := range targets {
		mustFail(e, &r, "connect to "+t.label+" ("+t.addr+")", s[fmt.Sprint("t", i)], t.label+" is reachable from the sandbox")
	}
	// Listing the exact socket in the policy: corral refuses socket grants
	// (a later release adds explicit ones); a refusal is secure.
	if len(targets) > 0 && targets[0].network == "unix" {
		o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{RO: []string{targets[0].addr}}), Probe: []string{"connect", "unix", targets[0].addr}})
		if err == nil {
			e.Check(&r, "a policy listing the exact socket "+targets[0].addr+" read-only (refusing or allowing is per policy)", briefOut(o), true, "")
		}
	}
	// A socket inside a granted directory: corral hides the sockets it
	// finds there at start (Landlock < ABI 9 cannot refuse connect()).
	g := e.TempDir("p15-granted")
	gs, err := listen("unix", filepath.Join(g, "agent.sock"))
	if err != nil {
		failNow(e, &r, "listen in the granted dir", err)
		return r
	}
	ctrs = append(ctrs, gs)
	o, err = e.Corral(ctx, Run{Policy: e.policyFor(pol{RO: []string{g}}), Probe: []string{"connect", "unix", gs.Addr()}})
	if err != nil {
		failNow(e, &r, "corral run (granted dir)", err)
		return r
	}
	var res string
	reached := false
	if o.Report != nil && len(o.Report.Results) > 0 {
		res = show(o.Report.Results[0])
		reached = o.Report.Results[0].OK
	} else {
		res = brief(o)
	}
	settle()
	reached = reached || gs.Count() > 0
	attempt := fmt.Sprintf("connect to a socket inside a read-only granted dir (ro: [%s]), not listed itself; Landlock ABI %d", g, abi)
	e.Check(&r, attempt, res+fmt.Sprintf("; host listener saw %d", gs.Count()), !reached, "a unix socket inside a granted directory is connectable")
	settle()
	for _, t := range targets {
		if t.c != nil {
			e.Check(&r, "host: "+t.label+" saw", fmt.Sprintf("%d connections", t.c.Count()), t.c.Count() == 0, t.label+" was reached from the sandbox")
		}
	}
	return r
}
