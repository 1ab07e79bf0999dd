//go:build linux

package qualify

// P28 late unix sockets: a host process makes a listening unix socket in a
// granted read-write directory after the sandbox started (so no start-up
// scan can hide it), then the sandbox tries to reach it.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func init() {
	Register(Case{ID: "P28", Title: "late unix sockets", Applies: linuxKernel, Run: runP28})
}

// p28UnixSockets, when set (tests only), is written as the policy's
// network.unix_sockets: "allow" shows that the case catches the hole.
var p28UnixSockets string

// P28: workdir read-write (the default grant). The sandbox writes a ready
// file and waits; the host then listens on a stream and a datagram socket
// in the workdir and gives the go-ahead; the sandbox connects to both
// (socket(2)), and tries them through socketpair(2) ends too (a datagram
// pair's end can send to any named socket). Secure: every attempt fails
// and the host listeners see nothing, while socketpair pipes still work.
// Control: with network.unix_sockets: allow the late stream socket is
// reached, so the case can see the hole.
func runP28(ctx context.Context, e *Env) Result {
	r := newResult()
	p := pol{}
	if p28UnixSockets != "" {
		p.Network, p.NetRules = "none", "  unix_sockets: "+p28UnixSockets+"\n"
		e.Check(&r, "test hook: network.unix_sockets: "+p28UnixSockets, p.NetRules, true, "")
	}
	s, ls, lg, ok := lateSockets(ctx, e, &r, p, "")
	if !ok {
		return r
	}
	mustFail(e, &r, "connect to the late stream socket", s["connect stream"], "a unix socket made in a granted directory during the run is connectable")
	mustFail(e, &r, "send to the late datagram socket", s["connect dgram"], "a unix datagram socket made in a granted directory during the run is reachable")
	pair := s["socketpair"]
	var pipes, reach []string
	reached := false
	for _, res := range pair.Results {
		if strings.HasPrefix(res.What, "socketpair stream") && !strings.Contains(res.What, " connect ") {
			pipes = append(pipes, res.What+" => "+show(res))
			continue
		}
		if strings.Contains(res.What, " connect ") || strings.Contains(res.What, " sendto ") {
			reach = append(reach, res.What+" => "+show(res))
			reached = reached || res.OK
		}
	}
	e.Check(&r, "reach the late sockets through socketpair ends (connect, sendto)", strings.Join(reach, "; "), pair.reported() && len(reach) > 0 && !reached, "a socketpair end reached a unix socket made in a granted directory during the run")
	// Not a security check: what deny keeps working, for the record.
	e.Check(&r, "socketpair(AF_UNIX, SOCK_STREAM) pipes between processes (kept working)", strings.Join(pipes, "; "), true, "")
	settle()
	e.Check(&r, "host: the late sockets saw", fmt.Sprintf("%d stream connections, %d datagrams", ls.Count(), lg.Count()), ls.Count() == 0 && lg.Count() == 0, "the host's late unix socket was reached from the sandbox")

	p = pol{Network: "none", NetRules: "  unix_sockets: allow\n"}
	s, ls, _, ok = lateSockets(ctx, e, &r, p, "control (unix_sockets: allow): ")
	if !ok {
		return r
	}
	mustSucceed(e, &r, "control (unix_sockets: allow): connect to the late stream socket", s["connect stream"], "with unix_sockets: allow the late socket was not reached: the case cannot show the hole")
	settle()
	e.Check(&r, "control (unix_sockets: allow): host: the late stream socket saw", fmt.Sprintf("%d connections", ls.Count()), ls.Count() > 0, "with unix_sockets: allow the host listener saw nothing: the case cannot show the hole")
	return r
}

// lateSockets runs P28's sandbox with p: it makes the host's sockets in
// the workdir once the sandbox has signalled, and returns the steps'
// output and the listeners; ok is false (r failed) when it could not.
func lateSockets(ctx context.Context, e *Env, r *Result, p pol, label string) (s map[string]stepOut, ls, lg *Listener, ok bool) {
	work := e.TempDir("p28-work")
	const (
		ready   = "p28-sandbox-started"
		goAhead = "p28-sockets-made"
		stream  = "late.sock"
		dgram   = "late-dgram.sock"
	)
	args := e.steps(
		step{Label: "signal", Shell: ": > " + ready + " && echo started"},
		// Up to 30 s for the host's go-ahead.
		step{Label: "wait", Shell: "i=0; while [ ! -e " + goAhead + " ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; [ -S " + stream + " ] && echo sockets-seen"},
		step{Label: "connect stream", Args: []string{"connect", "unix", stream}},
		step{Label: "connect dgram", Args: []string{"connect", "unix", dgram}},
		step{Label: "socketpair", Args: []string{"unixpair", stream, dgram}},
	)
	run, err := e.Start(ctx, Run{Policy: e.policyFor(p), Workdir: work, Args: args, Timeout: 60 * time.Second})
	if err != nil {
		failNow(e, r, label+"corral run", err)
		return nil, nil, nil, false
	}
	started := false
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if hostExists(filepath.Join(work, ready)) {
			started = true
			break
		}
		if run.Cmd.ProcessState != nil {
			break
		}
	}
	if !started {
		run.abandon()
		o, _ := run.Wait()
		e.Check(r, label+"the sandbox started and signalled (wrote "+ready+" in the workdir)", briefOut(o), false, "the sandbox never signalled that it started: the attack was not attempted")
		return nil, nil, nil, false
	}
	if ls, err = e.Listen("unix", filepath.Join(work, stream)); err != nil {
		failNow(e, r, label+"host: listen on "+stream+" in the workdir", err)
		return nil, nil, nil, false
	}
	if lg, err = e.Listen("unixgram", filepath.Join(work, dgram)); err != nil {
		failNow(e, r, label+"host: listen on "+dgram+" in the workdir", err)
		return nil, nil, nil, false
	}
	if err := os.WriteFile(filepath.Join(work, goAhead), nil, 0o644); err != nil {
		failNow(e, r, label+"host: the go-ahead", err)
		return nil, nil, nil, false
	}
	e.Check(r, label+"host: after the sandbox started, listen in its read-write workdir", fmt.Sprintf("stream %s, datagram %s", ls.Addr(), lg.Addr()), true, "")
	o, err := run.Wait()
	if err != nil {
		failNow(e, r, label+"corral run", err)
		return nil, nil, nil, false
	}
	s = parseSteps(o)
	e.Check(r, label+"run the probes", brief(o), s["end"].Ran && strings.Contains(s["wait"].Text, "sockets-seen"), "the script did not finish, or never saw the host's sockets")
	return s, ls, lg, true
}
