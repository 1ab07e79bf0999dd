package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
)

// request is the part of a configuration document the stand-in acts on.
// It is decoded only after the document validated against the schema.
type request struct {
	Version     *string         `json:"version"`
	Containment *string         `json:"containment"`
	Phase       *string         `json:"phase"`
	SandboxID   *string         `json:"sandboxId"`
	Filesystem  *filesystem     `json:"filesystem"`
	Network     *network        `json:"network"`
	UI          json.RawMessage `json:"ui"`
	Process     *process        `json:"process"`
}

type filesystem struct {
	ReadonlyPaths  []string `json:"readonlyPaths"`
	ReadwritePaths []string `json:"readwritePaths"`
	DeniedPaths    []string `json:"deniedPaths"`
}

type network struct {
	DefaultPolicy     *string `json:"defaultPolicy"`
	AllowLocalNetwork *bool   `json:"allowLocalNetwork"`
}

type process struct {
	CommandLine *string  `json:"commandLine"`
	Cwd         *string  `json:"cwd"`
	Env         []string `json:"env"`
	Timeout     *uint64  `json:"timeout"`
}

func decodeRequest(data []byte) (*request, error) {
	r := &request{}
	return r, json.Unmarshal(data, r)
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// workloadFrom builds the workload of a one-shot or exec request: the
// trailing "-- CMD ..." wins over process.commandLine.
func workloadFrom(o *options, p *process) (*workload, bool) {
	w := &workload{argv: o.command}
	if p != nil {
		if len(w.argv) == 0 && p.CommandLine != nil && *p.CommandLine != "" {
			w.commandLine = *p.CommandLine
		}
		if p.Env != nil {
			w.env, w.hasEnv = p.Env, true
		}
		w.cwd = str(p.Cwd)
		if p.Timeout != nil {
			w.timeoutMs = *p.Timeout
		}
	}
	return w, len(w.argv) > 0 || w.commandLine != ""
}

// defaultCwd follows MXC's documented ProcessContainer choice when
// process.cwd is omitted: the first read-write grant that is an existing
// directory, else the first such read-only grant, else the system drive
// root ("/" here). It never inherits the launcher's directory.
func defaultCwd(fs *filesystem) string {
	if fs != nil {
		for _, list := range [][]string{fs.ReadwritePaths, fs.ReadonlyPaths} {
			for _, d := range list {
				if st, err := os.Stat(d); err == nil && st.IsDir() {
					return d
				}
			}
		}
	}
	if runtime.GOOS == "windows" {
		if d := os.Getenv("SystemDrive"); d != "" {
			return d + `\`
		}
		return `C:\`
	}
	return string(filepath.Separator)
}
