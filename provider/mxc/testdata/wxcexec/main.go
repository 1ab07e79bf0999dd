// Command wxcexec is the test stand-in for Microsoft MXC's wxc-exec, the
// executor Corral's mxc provider drives (contract:
// shared/reference/mxc/CONTRACT.md). It is the project's only sanctioned
// mock: it runs every workload as an ordinary child process of its own, with
// no AppContainer, BaseContainer, agent user, path grant, UI restriction or
// network filter. It proves wiring (arguments, configuration documents,
// envelopes, exit codes, lifecycle state), never isolation, and says so on
// the first line of stderr of every invocation (banner) and in --probe
// (tier "mock").
//
// Usage:
//
//	wxcexec [CONFIG_PATH] | --config PATH | --config-base64 B64
//	        [--experimental] [--probe] [--dry-run] [--debug] [--log-file F]
//	        [-- CMD ...]
//
// Knobs (environment):
//
//	WXC_SCHEMA_DIR   directory of mxc-config.schema.*.json (relative: to the
//	                 stand-in's working directory); unset: the nearest
//	                 shared/reference/mxc above the working directory or the
//	                 executable
//	WXC_STATE_DIR    session state (default os.TempDir()/wxcexec-state):
//	                 sessions/, workspaces/ and profiles/ (each session's
//	                 agent user profile, USERPROFILE and HOME of its execs)
//	WXC_FAIL         comma list of provision|start|exec|stop|deprovision|
//	                 oneshot|probe: that invocation fails with backend_error
//	WXC_CRASH_AFTER  comma list of phases: do the phase, then exit 137 with
//	                 no output
//	WXC_LOG          append "phase=<p> sandboxId=<id> exit=<code>" per call
//
// Built by tests with `go build`; it lives under testdata so `./...` skips it.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Banner is the first line this program writes to stderr, every time.
const Banner = "wxc-exec stand-in: mock — not evidence of OS enforcement"

// Exit codes.
const (
	exitOK      = 0
	exitFail    = 1
	exitTimeout = 255 // -1 on Windows
	exitCrash   = 137 // WXC_CRASH_AFTER
)

// invocation is what the WXC_LOG line records.
var invocation struct {
	phase, sandboxID string
}

func main() {
	// Pdeathsig (Linux) is tied to the thread that starts the child: keep
	// main on one thread for the life of the process.
	runtime.LockOSThread()
	invocation.phase = "invalid"
	code := run(os.Args[1:])
	logInvocation(code)
	os.Exit(code)
}

func logInvocation(code int) {
	path := os.Getenv("WXC_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wxc-exec stand-in: WXC_LOG: %v\n", err)
		return
	}
	// One write of a short line with O_APPEND: parallel invocations do not
	// interleave.
	fmt.Fprintf(f, "phase=%s sandboxId=%s exit=%d\n", invocation.phase, invocation.sandboxID, code)
	f.Close()
}

type options struct {
	configPath   string
	configB64    string
	isB64        bool
	haveConfig   bool
	experimental bool
	probe        bool
	dryRun       bool
	command      []string // after "--"
}

func parseArgs(args []string) (*options, error) {
	o := &options{}
	setConfig := func(isB64 bool, v string) error {
		if o.haveConfig {
			return errors.New("more than one configuration given (CONFIG_PATH, --config, --config-base64 are exclusive)")
		}
		o.haveConfig, o.isB64 = true, isB64
		if isB64 {
			o.configB64 = v
		} else {
			o.configPath = v
		}
		return nil
	}
	value := func(i *int, name string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("%s needs a value", name)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "--") || a == "--" {
			hasVal = false
			name = a
		}
		var err error
		switch name {
		case "--":
			o.command = args[i+1:]
			if len(o.command) == 0 {
				return nil, errors.New(`"--" must be followed by a command`)
			}
			return o, nil
		case "--config", "--config-base64", "--log-file":
			if !hasVal {
				if val, err = value(&i, name); err != nil {
					return nil, err
				}
			}
			switch name {
			case "--config":
				err = setConfig(false, val)
			case "--config-base64":
				err = setConfig(true, val)
			}
		case "--experimental":
			o.experimental = true
		case "--probe":
			o.probe = true
		case "--dry-run":
			o.dryRun = true
		case "--debug":
		default:
			if strings.HasPrefix(a, "-") {
				return nil, fmt.Errorf("unknown flag %q", a)
			}
			err = setConfig(false, a)
		}
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}

// diag writes a request or parse diagnostic to stderr and returns exit 1.
func diag(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "wxc-exec stand-in: "+format+"\n", args...)
	return exitFail
}

// envelope is the state-aware error document.
type apiError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Operation string `json:"operation,omitempty"`
}

// marshal encodes v as one line of JSON (no HTML escaping), without the
// trailing newline.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func errorJSON(code, op, format string, args ...any) []byte {
	return marshal(map[string]apiError{"error": {Code: code, Message: fmt.Sprintf(format, args...), Operation: op}})
}

// printJSON writes v to stdout as one JSON document and a newline.
func printJSON(v any) { os.Stdout.Write(append(marshal(v), '\n')) }

func knobList(name string) map[string]bool {
	set := map[string]bool{}
	for _, p := range strings.Split(os.Getenv(name), ",") {
		if p = strings.TrimSpace(p); p != "" {
			set[p] = true
		}
	}
	return set
}

func run(args []string) int {
	fmt.Fprintln(os.Stderr, Banner)
	o, err := parseArgs(args)
	if err != nil {
		return diag("%v", err)
	}
	if o.probe {
		invocation.phase = "probe"
		if knobList("WXC_FAIL")["probe"] {
			os.Stderr.Write(append(errorJSON("backend_error", "probe", "injected failure in probe"), '\n'))
			return exitFail
		}
		printJSON(probeResult())
		return exitOK
	}
	if !o.haveConfig {
		return diag("no configuration: give CONFIG_PATH, --config PATH or --config-base64 B64")
	}
	var data []byte
	if o.isB64 {
		data, err = base64.StdEncoding.DecodeString(o.configB64)
		if err != nil {
			return diag("--config-base64: %v", err)
		}
	} else if data, err = os.ReadFile(o.configPath); err != nil {
		return diag("reading the configuration: %v", err)
	}
	doc, err := decodeDoc(data)
	if err != nil {
		return diag("configuration is not valid JSON: %v", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return diag("configuration is not a JSON object")
	}
	if p, ok := obj["phase"]; ok && p != nil {
		return stateAware(o, obj, data)
	}
	invocation.phase = "oneshot"
	return oneShot(o, obj, data)
}

func probeResult() any {
	return map[string]any{
		"tier":                  "mock",
		"needsDaclAugmentation": false,
		"warnings":              []string{"mock executor: no OS enforcement"},
		"probes": map[string]any{
			"baseContainerApiPresent":        true,
			"bfscfgPresent":                  false,
			"baseContainerSupportsDenyPaths": true,
			"isolationSessionAvailable":      true,
			"uiCapabilities": map[string]bool{
				"disable":   true,
				"clipboard": true,
				"injection": true,
			},
		},
	}
}
