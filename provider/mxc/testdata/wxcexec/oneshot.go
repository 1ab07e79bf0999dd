package main

import (
	"errors"
	"fmt"
	"os"
)

// oneShot handles a request without phase: diagnostics on stderr and exit 1
// for request errors; backend_error JSON on stderr for infrastructure
// failures; otherwise the workload's exit code.
func oneShot(o *options, obj map[string]any, data []byte) int {
	file, err := checkRequest(obj)
	var ie infraError
	if errors.As(err, &ie) {
		os.Stderr.Write(append(errorJSON("backend_error", "", "stand-in cannot validate: %v", ie.error), '\n'))
		return exitFail
	}
	if err != nil {
		return diag("malformed_request: %v", err)
	}
	req, err := decodeRequest(data)
	if err != nil {
		return diag("malformed_request: %v", err)
	}
	switch c := str(req.Containment); c {
	case "", "process", "processcontainer":
	case "isolation_session":
		if !o.experimental {
			return diag("unsupported_containment: isolation_session is experimental: pass --experimental")
		}
		return diag("unsupported_containment: this stand-in runs isolation_session only through state-aware phases (provision, start, exec, stop, deprovision)")
	default:
		return diag("unsupported_containment: %q is not a containment this stand-in runs (processcontainer, or isolation_session with phases)", c)
	}
	w, ok := workloadFrom(o, req.Process)
	if !ok {
		return diag("malformed_request: no command: give process.commandLine or \"-- CMD ...\"")
	}
	if w.cwd == "" {
		w.cwd = defaultCwd(req.Filesystem)
	}
	if o.dryRun {
		printJSON(map[string]any{"result": map[string]any{"dryRun": true, "schema": file, "containment": "processcontainer", "tier": "mock"}})
		return exitOK
	}
	if knobList("WXC_FAIL")["oneshot"] {
		os.Stderr.Write(append(errorJSON("backend_error", "", "injected failure in oneshot"), '\n'))
		return exitFail
	}
	res := w.run()
	switch {
	case res.startErr != nil:
		os.Stderr.Write(append(errorJSON("backend_error", "", "cannot start the workload: %v", res.startErr), '\n'))
		return exitFail
	case knobList("WXC_CRASH_AFTER")["oneshot"]:
		return exitCrash
	case res.timedOut:
		fmt.Fprintf(os.Stderr, "wxc-exec stand-in: the workload exceeded process.timeout (%d ms) and was killed\n", w.timeoutMs)
		return exitTimeout
	}
	return res.code
}
