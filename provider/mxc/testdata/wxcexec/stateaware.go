package main

import (
	"errors"
	"fmt"
	"os"
)

var phases = map[string]bool{"provision": true, "start": true, "exec": true, "stop": true, "deprovision": true}

// stateAware handles a request carrying phase. Every outcome but a
// successful exec is exactly one JSON document on stdout: {"result":{...}}
// with exit 0 or {"error":{...}} with exit 1.
func stateAware(o *options, obj map[string]any, data []byte) int {
	phase, isStr := obj["phase"].(string)
	if id, ok := obj["sandboxId"].(string); ok {
		invocation.sandboxID = id
	}
	envelope := func(e *stateErr) int {
		printJSON(map[string]apiError{"error": {Code: e.code, Message: e.msg, Operation: phase}})
		return exitFail
	}
	if !isStr {
		return envelope(fail("malformed_request", "phase must be a string, not %v", obj["phase"]))
	}
	invocation.phase = phase
	if !phases[phase] {
		return envelope(fail("unsupported_phase", "unknown phase %q (provision, start, exec, stop, deprovision)", phase))
	}
	file, err := checkRequest(obj)
	var ie infraError
	if errors.As(err, &ie) {
		return envelope(fail("backend_error", "stand-in cannot validate: %v", ie.error))
	}
	if err != nil {
		return envelope(fail("malformed_request", "%v", err))
	}
	req, err := decodeRequest(data)
	if err != nil {
		return envelope(fail("malformed_request", "%v", err))
	}
	if c := str(req.Containment); c != "isolation_session" {
		return envelope(fail("unsupported_containment", "state-aware phases need containment isolation_session (got %q)", c))
	}
	if !o.experimental {
		return envelope(fail("unsupported_containment", "isolation_session is experimental: pass --experimental"))
	}
	if e := phasePayload(phase, obj, req); e != nil {
		return envelope(e)
	}
	w, hasCmd := workloadFrom(o, req.Process)
	if phase == "exec" && !hasCmd {
		return envelope(fail("malformed_request", "exec needs a command: process.commandLine or \"-- CMD ...\""))
	}
	if o.dryRun {
		printJSON(map[string]any{"result": map[string]any{"dryRun": true, "schema": file, "containment": "isolation_session", "phase": phase, "tier": "mock"}})
		return exitOK
	}
	if knobList("WXC_FAIL")[phase] {
		return envelope(fail("backend_error", "injected failure in %s", phase))
	}
	crash := knobList("WXC_CRASH_AFTER")[phase]

	st, err := openStore()
	if err != nil {
		return envelope(fail("backend_error", "session state %s: %v", stateDir(), err))
	}
	if phase == "provision" {
		ses, err := st.provision()
		st.unlock()
		if err != nil {
			return envelope(fail("backend_error", "provision: %v", err))
		}
		invocation.sandboxID = ses.SandboxID
		if crash {
			return exitCrash // the session exists; its id is never printed
		}
		printJSON(map[string]any{"result": map[string]any{"sandboxId": ses.SandboxID, "metadata": ses.Metadata}})
		return exitOK
	}

	ses, h, err := st.load(str(req.SandboxID))
	if err == nil {
		err = transition(st, phase, h, ses)
	}
	st.unlock()
	var se *stateErr
	switch {
	case errors.As(err, &se):
		return envelope(se)
	case err != nil:
		return envelope(fail("backend_error", "%s: %v", phase, err))
	}
	if phase != "exec" {
		if crash {
			return exitCrash
		}
		printJSON(map[string]any{"result": map[string]any{}})
		return exitOK
	}
	if w.cwd == "" {
		w.cwd = ses.Metadata.EphemeralWorkspacePath
	}
	w.logon = profileEnv(st.profile(h), ses.Metadata.AgentUserName)
	res := w.run()
	switch {
	case res.startErr != nil:
		return envelope(fail("backend_error", "cannot start the workload: %v", res.startErr))
	case crash:
		return exitCrash
	case res.timedOut:
		fmt.Fprintf(os.Stderr, "wxc-exec stand-in: the workload exceeded process.timeout (%d ms) and was killed\n", w.timeoutMs)
		return exitTimeout
	}
	return res.code
}

// transition applies a lifecycle phase to a loaded session (exec only
// checks that the session is started). Neither stop nor deprovision ends
// a process: the stand-in cannot find the detached ones a workload left,
// so the caller stops what it started first.
func transition(st *store, phase, h string, ses *session) error {
	id := ses.SandboxID
	switch phase {
	case "start":
		switch ses.State {
		case stStarted:
			return fail("backend_error", "%s is already started", id)
		case stStopped:
			return fail("backend_error", "%s was stopped: a stopped IsolationSession cannot be restarted in place", id)
		}
		ses.State = stStarted
		return st.save(h, ses)
	case "stop":
		switch ses.State {
		case stProvisioned:
			return fail("not_started", "%s was never started", id)
		case stStopped:
			return fail("backend_error", "%s is already stopped", id)
		}
		ses.State = stStopped
		return st.save(h, ses)
	case "exec":
		if ses.State != stStarted {
			return fail("not_started", "%s is %s, not started", id, ses.State)
		}
		return nil
	case "deprovision":
		return st.deprovision(h, ses)
	}
	return fail("unsupported_phase", "unknown phase %q", phase)
}

// phasePayload checks that each phase carries only what MXC's
// IsolationSession takes: provision the policy sections and no sandboxId;
// start/stop/deprovision only phase and sandboxId; exec those plus
// process. (Stricter than MXC documents: a stray section is a caller bug.)
// For provision it also applies the backend's policy rules.
func phasePayload(phase string, obj map[string]any, req *request) *stateErr {
	has := func(k string) bool { v, ok := obj[k]; return ok && v != nil }
	if phase == "provision" {
		if has("sandboxId") {
			return fail("malformed_request", "provision takes no sandboxId (provision always mints a new session)")
		}
		if has("process") {
			return fail("malformed_request", "provision takes no process section (send it with exec)")
		}
		if fs := req.Filesystem; fs != nil && len(fs.ReadonlyPaths)+len(fs.ReadwritePaths)+len(fs.DeniedPaths) > 0 {
			return fail("policy_validation", "isolation_session takes no filesystem grants")
		}
		if present(req.UI) {
			return fail("policy_validation", "isolation_session takes no ui section")
		}
		if n := req.Network; n == nil || str(n.DefaultPolicy) != "allow" || n.AllowLocalNetwork == nil || !*n.AllowLocalNetwork {
			return fail("policy_validation", "isolation_session cannot filter the network: provision requires network.defaultPolicy \"allow\" with allowLocalNetwork true")
		}
		return nil
	}
	if !has("sandboxId") {
		return fail("malformed_request", "phase %s needs the sandboxId returned by provision", phase)
	}
	for _, k := range []string{"filesystem", "network", "ui", "runtimeConfig", "process"} {
		if k == "process" && phase == "exec" {
			continue
		}
		if has(k) {
			return fail("malformed_request", "phase %s takes no %s section", phase, k)
		}
	}
	return nil
}
