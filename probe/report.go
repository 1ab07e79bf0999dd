// Package probe holds the checks that run inside a sandbox for
// `corral qualify`. They are subcommands of the corral binary itself
// (`corral __probe NAME [ARGS...]`), so they need no tools inside the
// sandbox's image. Each prints one Report as a JSON line on stdout and exits
// 0: an operation that fails is data, not an error of the probe.
package probe

// Arg is argv[1] that makes the corral binary run a probe.
const Arg = "__probe"

// Report is what one probe invocation prints.
type Report struct {
	Probe   string   `json:"probe"`
	Results []Result `json:"results"`
}

// Result is one attempted operation.
type Result struct {
	What   string `json:"what"`             // e.g. "read /etc/shadow", "connect tcp 127.0.0.1:8080"
	OK     bool   `json:"ok"`               // the operation succeeded
	Errno  string `json:"errno,omitempty"`  // e.g. "EPERM", "EACCES" when it failed with an errno
	Detail string `json:"detail,omitempty"` // content read (bounded), HTTP status, pids seen, ...
}
