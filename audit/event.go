// Package audit writes Corral's events as OCSF JSON Lines: the run's
// lifecycle (Process Activity) and the egress proxy's decisions (HTTP
// Activity, http.go).
//
// Each event is one JSON object on its own line, valid for the OCSF schema
// version it declares (SchemaVersion, metadata.version), as the OCSF
// Server's validator decides (internal/ocsfcheck checks every event the
// tests produce against the official compiled schema). The run's
// lifecycle is the "Process Activity" class (class_uid 1007, category_uid
// 1 "System Activity"; https://schema.ocsf.io/1.8.0/classes/process_activity):
// a Launch (activity_id 1) event when the workload starts, or one with
// status Failure when it never did, and a Terminate (activity_id 2) event
// when it ends; type_uid = class_uid*100 + activity_id. An attribute that
// an OCSF profile adds (device outside System Activity: host; action and
// disposition: security_control) comes with that profile named in
// metadata.profiles. Corral-specific data (policy hash, provider,
// enforcement layers, kill details) lives under the OCSF "unmapped"
// object. docs/audit.md is the catalogue of events.
package audit

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OCSF constants for the Process Activity class (schema.ocsf.io, class 1007).
const (
	SchemaVersion = "1.8.0" // metadata.version

	ClassUID     = 1007
	ClassName    = "Process Activity"
	CategoryUID  = 1
	CategoryName = "System Activity"

	ActivityLaunch    = 1
	ActivityTerminate = 2

	SeverityInformational = 1
	SeverityLow           = 2
	SeverityMedium        = 3

	StatusSuccess = 1
	StatusFailure = 2

	ProductName = "Corral"
	VendorName  = "Corral"
)

// Event is anything Sink.Emit can write: an OCSF event that marshals to a
// single JSON object: ProcessActivity or HTTPActivity.
type Event interface {
	OCSFClassUID() int
}

// ProcessActivity is an OCSF Process Activity event (class_uid 1007).
// Build it with Launch or Terminate; fields may be adjusted before Emit.
type ProcessActivity struct {
	Classification
	StatusID     int    `json:"status_id"`
	Status       string `json:"status"`
	StatusDetail string `json:"status_detail,omitempty"`
	Message      string `json:"message,omitempty"`

	Metadata Metadata `json:"metadata"`
	Actor    Actor    `json:"actor"`
	Process  Process  `json:"process"`
	Device   Device   `json:"device"`

	// ExitCode is set on Terminate events of a process that exited (one
	// a signal ended has none: unmapped.signal names the signal).
	ExitCode *int `json:"exit_code,omitempty"`

	Unmapped Unmapped `json:"unmapped"`
}

// OCSFClassUID implements Event.
func (ProcessActivity) OCSFClassUID() int { return ClassUID }

// Classification holds the OCSF base attributes every event begins with;
// embedded, its fields marshal first and flat.
type Classification struct {
	Time         int64  `json:"time"` // ms since the Unix epoch
	ClassUID     int    `json:"class_uid"`
	ClassName    string `json:"class_name"`
	CategoryUID  int    `json:"category_uid"`
	CategoryName string `json:"category_name"`
	ActivityID   int    `json:"activity_id"`
	ActivityName string `json:"activity_name"`
	TypeUID      int    `json:"type_uid"`
	TypeName     string `json:"type_name"`
	SeverityID   int    `json:"severity_id"`
	Severity     string `json:"severity"`
}

// classify fills the base attributes of an event of class (classUID,
// className) in category (catUID, catName) at t; type_uid is
// class_uid*100 + activity_id and type_name "class: activity", as the OCSF
// schema defines them. For activity 99 (Other), actName is the source's
// own name of the activity (the schema: activity_name then "contains a
// data source specific value"), and type_name is the type's caption,
// "class: Other" (except for Base Event, whose type_uid is then 99 itself,
// whose caption the validator expects the source's name instead of).
func classify(t time.Time, classUID int, className string, catUID int, catName string, act int, actName string) Classification {
	typeName := className + ": " + actName
	if act == ActivityOther && classUID != BaseClassUID {
		typeName = className + ": Other"
	}
	return Classification{
		Time: t.UnixMilli(), ClassUID: classUID, ClassName: className,
		CategoryUID: catUID, CategoryName: catName, ActivityID: act, ActivityName: actName,
		TypeUID: classUID*100 + act, TypeName: typeName,
	}
}

// Metadata is the OCSF metadata object.
type Metadata struct {
	Version string `json:"version"`
	// Profiles are the OCSF profiles whose attributes the event carries.
	Profiles       []string `json:"profiles,omitempty"`
	Product        Product  `json:"product"`
	UID            string   `json:"uid"`                       // unique per event (UUID v4)
	CorrelationUID string   `json:"correlation_uid,omitempty"` // the sandbox/run id
}

// Product is the OCSF product object.
type Product struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name"`
	Version    string `json:"version,omitempty"`
}

// Actor is the OCSF actor object; Process is the Corral supervisor.
type Actor struct {
	Process Process `json:"process"`
}

// Process is the OCSF process object.
type Process struct {
	PID     int    `json:"pid"`
	Name    string `json:"name,omitempty"`
	CmdLine string `json:"cmd_line,omitempty"`
	File    *File  `json:"file,omitempty"`
	User    *User  `json:"user,omitempty"`
}

// File is the OCSF file object (type_id 1 = Regular File).
type File struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	TypeID int    `json:"type_id"`
	Type   string `json:"type"`
}

// User is the OCSF user object; OCSF types uid as a string.
type User struct {
	UID string `json:"uid"`
}

// Device is the OCSF device object for the host running Corral.
type Device struct {
	Hostname string `json:"hostname,omitempty"`
	TypeID   int    `json:"type_id"`
	Type     string `json:"type"`
	OS       OS     `json:"os"`
}

// OS is the OCSF operating system object. OCSF os.type_id: 100 Windows,
// 200 Linux, 300 macOS, 99 Other.
type OS struct {
	Name    string `json:"name"`
	TypeID  int    `json:"type_id"`
	Type    string `json:"type"`
	Version string `json:"version,omitempty"` // kernel release
}

// Unmapped holds Corral-specific attributes with no OCSF equivalent.
type Unmapped struct {
	SandboxID  string  `json:"sandbox_id,omitempty"`
	PolicyHash string  `json:"policy_hash,omitempty"`
	Provider   string  `json:"provider,omitempty"`
	Layers     []Layer `json:"layers,omitempty"`

	// Terminate only.
	Signal     string `json:"signal,omitempty"`
	TimedOut   *bool  `json:"timed_out,omitempty"`
	Killed     *bool  `json:"killed,omitempty"`
	Reason     string `json:"reason,omitempty"`
	DurationMS *int64 `json:"duration_ms,omitempty"`
}

// Layer reports one enforcement layer of the sandbox.
type Layer struct {
	Layer       string `json:"layer"`
	Requirement string `json:"requirement,omitempty"`
	State       string `json:"state,omitempty"`
	Detail      string `json:"detail,omitempty"`
}

// RunInfo describes the run; it is shared by its Launch and Terminate events.
type RunInfo struct {
	SandboxID  string // metadata.correlation_uid and unmapped.sandbox_id
	PolicyHash string
	Provider   string
	Version    string // Corral version, metadata.product.version
	Layers     []Layer
	// Supervisor is the Corral process (actor.process). If its PID is 0 the
	// current process is used.
	Supervisor Proc
}

// Proc identifies a process. PID is as seen from the host. UID < 0 means
// unknown and omits process.user. CmdLine is redacted before it is recorded.
type Proc struct {
	PID     int
	UID     int
	CmdLine []string
	Path    string
}

// Exit describes how the workload ended. Killed means Corral killed it
// (timeout, forwarded SIGINT/SIGTERM, supervisor cleanup); TimedOut implies
// Killed. Signal names the terminating signal, e.g. "SIGKILL".
type Exit struct {
	Code     int
	Signal   string
	TimedOut bool
	Killed   bool
	Reason   string
	Duration time.Duration
}

// Launch builds the Process Activity: Launch event (type_uid 100701) for the
// workload.
func Launch(run RunInfo, workload Proc) ProcessActivity {
	e := base(run, workload, ActivityLaunch, "Launch")
	e.Message = "sandboxed workload launched"
	return e
}

// NotLaunched builds the Process Activity: Launch event of a workload
// that never ran because its sandbox could not be made or started: status
// Failure, severity Medium, the reason in status_detail.
func NotLaunched(run RunInfo, workload Proc, reason string) ProcessActivity {
	e := base(run, workload, ActivityLaunch, "Launch")
	e.setSeverity(SeverityMedium)
	e.setStatus(StatusFailure)
	e.StatusDetail = reason
	e.Message = "sandboxed workload not launched: " + reason
	return e
}

// Terminate builds the Process Activity: Terminate event (type_uid 100702).
// A clean exit (code 0, no signal) is Success/Informational; a non-zero exit
// or signal death is Failure/Informational; a kill by Corral is
// Failure/Medium with unmapped.killed=true and unmapped.reason set. A
// process a signal ended has no exit_code (OCSF: "the exit code reported
// by a process when it terminates"; such a process reports none, whatever
// corral itself then exits with), only unmapped.signal.
func Terminate(run RunInfo, workload Proc, exit Exit) ProcessActivity {
	e := base(run, workload, ActivityTerminate, "Terminate")
	code := exit.Code
	if exit.Signal == "" {
		e.ExitCode = &code
	}
	killed := exit.Killed || exit.TimedOut
	timedOut := exit.TimedOut
	ms := exit.Duration.Milliseconds()
	e.Unmapped.Signal = exit.Signal
	e.Unmapped.Killed = &killed
	e.Unmapped.TimedOut = &timedOut
	e.Unmapped.DurationMS = &ms
	e.Unmapped.Reason = exit.Reason

	switch {
	case killed:
		if e.Unmapped.Reason == "" {
			if timedOut {
				e.Unmapped.Reason = "timeout"
			} else {
				e.Unmapped.Reason = "killed by corral"
			}
		}
		e.setSeverity(SeverityMedium)
		e.setStatus(StatusFailure)
		e.StatusDetail = e.Unmapped.Reason
		e.Message = "sandboxed workload killed: " + e.Unmapped.Reason
	case exit.Signal != "":
		e.setStatus(StatusFailure)
		e.StatusDetail = "terminated by " + exit.Signal
		e.Message = "sandboxed workload terminated by " + exit.Signal
	case code != 0:
		e.setStatus(StatusFailure)
		e.StatusDetail = "exit code " + strconv.Itoa(code)
		e.Message = "sandboxed workload exited with code " + strconv.Itoa(code)
	default:
		e.Message = "sandboxed workload exited"
	}
	return e
}

func base(run RunInfo, workload Proc, activityID int, activityName string) ProcessActivity {
	sup := run.Supervisor
	if sup.PID == 0 {
		sup = self()
	}
	e := ProcessActivity{
		Classification: classify(time.Now(), ClassUID, ClassName, CategoryUID, CategoryName, activityID, activityName),
		Metadata:       newMetadata(run),
		Actor:          Actor{Process: toProcess(sup)},
		Process:        toProcess(workload),
		Device:         device(),
		Unmapped: Unmapped{
			SandboxID:  run.SandboxID,
			PolicyHash: run.PolicyHash,
			Provider:   run.Provider,
			Layers:     run.Layers,
		},
	}
	e.setSeverity(SeverityInformational)
	e.setStatus(StatusSuccess)
	return e
}

// hostProfile is metadata.profiles of an event whose device is the host
// profile's (every class outside System Activity and Findings).
var hostProfile = []string{"host"}

// newMetadata is the OCSF metadata of one new event of run, which carries
// the attributes of profiles.
func newMetadata(run RunInfo, profiles ...string) Metadata {
	return Metadata{
		Version:        SchemaVersion,
		Profiles:       profiles,
		Product:        Product{Name: ProductName, VendorName: VendorName, Version: run.Version},
		UID:            newUUID(),
		CorrelationUID: run.SandboxID,
	}
}

func (e *Classification) setSeverity(id int) {
	e.SeverityID = id
	switch id {
	case SeverityInformational:
		e.Severity = "Informational"
	case SeverityLow:
		e.Severity = "Low"
	case SeverityMedium:
		e.Severity = "Medium"
	case SeverityHigh:
		e.Severity = "High"
	default:
		e.Severity = "Unknown"
	}
}

func (e *ProcessActivity) setStatus(id int) {
	e.StatusID = id
	switch id {
	case StatusSuccess:
		e.Status = "Success"
	case StatusFailure:
		e.Status = "Failure"
	default:
		e.Status = "Unknown"
	}
}

func toProcess(p Proc) Process {
	out := Process{PID: p.PID, CmdLine: shellJoin(Redact(p.CmdLine))}
	path := p.Path
	if path == "" && len(p.CmdLine) > 0 && strings.Contains(p.CmdLine[0], "/") {
		path = p.CmdLine[0]
	}
	switch {
	case path != "":
		out.Name = filepath.Base(path)
		out.File = &File{Name: out.Name, Path: path, TypeID: 1, Type: "Regular File"}
	case len(p.CmdLine) > 0:
		out.Name = filepath.Base(p.CmdLine[0])
	}
	if p.UID >= 0 {
		out.User = &User{UID: strconv.Itoa(p.UID)}
	}
	return out
}

func self() Proc {
	exe, _ := os.Executable()
	return Proc{PID: os.Getpid(), UID: os.Getuid(), CmdLine: os.Args, Path: exe}
}

var (
	deviceOnce sync.Once
	deviceInfo Device
)

// device returns the host description, computed once per process.
func device() Device {
	deviceOnce.Do(func() {
		host, _ := os.Hostname()
		d := Device{Hostname: host, TypeID: 0, Type: "Unknown"}
		switch runtime.GOOS {
		case "linux":
			d.OS = OS{Name: "Linux", TypeID: 200, Type: "Linux"}
		case "darwin":
			d.OS = OS{Name: "macOS", TypeID: 300, Type: "macOS"}
		case "windows":
			d.OS = OS{Name: "Windows", TypeID: 100, Type: "Windows"}
		default:
			d.OS = OS{Name: runtime.GOOS, TypeID: 99, Type: "Other"}
		}
		d.OS.Version = kernelRelease()
		deviceInfo = d
	})
	return deviceInfo
}

func kernelRelease() string {
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// newUUID returns a random (version 4) UUID string.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

// shellJoin joins args into one POSIX shell word list, single-quoting any
// argument that is empty or holds characters the shell treats specially, so
// that cmd_line reads back unambiguously ("sh -c 'exit 3'").
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
