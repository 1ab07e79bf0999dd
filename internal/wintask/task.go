// Package wintask is the Windows autostart of corral service: a Task
// Scheduler task that runs corral at the logon of the user who enabled it,
// the counterpart of the systemd unit on Linux (service/autostart_linux.go).
// The task definition is generated here (Task.XML), kept in an owner-only
// file (Write), registered and removed with schtasks (Register,
// Unregister), and its trusted base checked (Check).
//
// XML, TaskName and Path are portable, so the definition can be built and
// tested anywhere; Register and Unregister run only on Windows; Write and
// Check work on Windows (handles and DACLs, internal/winfile) and on Unix
// (mode bits and owner).
package wintask

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrNotWindows: Task Scheduler, which Register and Unregister drive, is
// Windows'; elsewhere they return it.
var ErrNotWindows = errors.New("wintask: Task Scheduler is Windows': a logon task is registered only on Windows")

// Folder is the Task Scheduler folder corral's tasks are registered in.
const Folder = `\Corral`

// TaskName is the Task Scheduler path of session name's task:
// `\Corral\corral-service-NAME`.
func TaskName(name string) string { return Folder + `\corral-service-` + name }

// Path is where session name's task definition is kept:
// DIR\corral-service-NAME.xml (joined with the host's separator).
func Path(dir, name string) string {
	return filepath.Join(dir, "corral-service-"+name+".xml")
}

// Task is one logon task. It runs Exe with Args at the logon of UserID,
// as that user: least privilege (no elevation, even for an administrator),
// with the interactive token of the logon, no time limit, restarted on
// failure 3 times a minute apart, a second start ignored while one runs,
// started and kept running on batteries. See XML for each element.
type Task struct {
	// Name is the session's name, [a-z][a-z0-9-]{0,23} (corral service
	// names); the task is TaskName(Name).
	Name string
	// Description is the task's RegistrationInfo Description; empty gives
	// "corral service NAME (an agent gateway in a Corral session)".
	Description string
	// Exe is the program's absolute Windows path, X:\dir\prog.exe.
	Exe string
	// Args are the program's arguments, one string each (not a command
	// line); they are composed into one with Windows quoting rules.
	Args []string
	// UserID is the SID, as a string, of the account whose logon starts
	// the task and as whom it runs: the caller's, "S-1-5-21-...".
	UserID string
	// WorkingDir is the program's absolute working directory; empty leaves
	// Task Scheduler's default.
	WorkingDir string
}

// Namespace is the Task Scheduler schema's XML namespace ("Task Scheduler
// Schema", the Task element).
const Namespace = "http://schemas.microsoft.com/windows/2004/02/mit/task"

// The task definition, Task Scheduler schema version 1.2 (Windows 7 and
// later). Element names and values are the schema's; each is cited by its
// page in Microsoft's "Task Scheduler Schema Elements".
type taskXML struct {
	XMLName xml.Name `xml:"Task"`
	Version string   `xml:"version,attr"` // "Task Scheduler Schema, Task Element": 1.2
	Xmlns   string   `xml:"xmlns,attr"`
	// "Task Scheduler Schema, RegistrationInfo (taskType) Element": URI
	// and Description.
	RegistrationInfo struct {
		URI         string `xml:"URI"`
		Description string `xml:"Description"`
	} `xml:"RegistrationInfo"`
	Triggers struct {
		// "Task Scheduler Schema, LogonTrigger (triggerGroup) Element": its
		// UserId limits the trigger to that user's logon (without it, any
		// user's logon starts the task).
		LogonTrigger struct {
			Enabled bool   `xml:"Enabled"`
			UserID  string `xml:"UserId"`
		} `xml:"LogonTrigger"`
	} `xml:"Triggers"`
	Principals struct {
		// "Task Scheduler Schema, Principal (principalsType) Element":
		// LogonType InteractiveToken ("logonType Simple Type": the task runs
		// in the user's logon session, with its token, and only while the
		// user is logged on; no password is stored) and RunLevel
		// LeastPrivilege ("runLevelType Simple Type": the filtered token,
		// never elevated).
		Principal struct {
			ID        string `xml:"id,attr"`
			UserID    string `xml:"UserId"`
			LogonType string `xml:"LogonType"`
			RunLevel  string `xml:"RunLevel"`
		} `xml:"Principal"`
	} `xml:"Principals"`
	Settings settingsXML `xml:"Settings"`
	Actions  struct {
		Context string `xml:"Context,attr"` // the Principal's id
		// "Task Scheduler Schema, Exec (actionGroup) Element".
		Exec struct {
			Command          string `xml:"Command"`
			Arguments        string `xml:"Arguments,omitempty"`
			WorkingDirectory string `xml:"WorkingDirectory,omitempty"`
		} `xml:"Exec"`
	} `xml:"Actions"`
}

// settingsXML is "Task Scheduler Schema, Settings (taskType) Element"
// (settingsType).
type settingsXML struct {
	// "MultipleInstancesPolicy (settingsType) Element": IgnoreNew, a
	// logon while the task runs starts no second gateway.
	MultipleInstancesPolicy string `xml:"MultipleInstancesPolicy"`
	// "DisallowStartIfOnBatteries (settingsType) Element" and
	// "StopIfGoingOnBatteries (settingsType) Element" both default to
	// true: a laptop on battery would not start the gateway, or would stop
	// it when unplugged.
	DisallowStartIfOnBatteries bool `xml:"DisallowStartIfOnBatteries"`
	StopIfGoingOnBatteries     bool `xml:"StopIfGoingOnBatteries"`
	Enabled                    bool `xml:"Enabled"`
	// "ExecutionTimeLimit (settingsType) Element": PT0S lets the task run
	// indefinitely (the default stops it after 72 hours).
	ExecutionTimeLimit string `xml:"ExecutionTimeLimit"`
	// "Priority (settingsType) Element": the default 7 is
	// BELOW_NORMAL_PRIORITY_CLASS, for background tasks, with lower I/O
	// and memory priority; 5 is NORMAL_PRIORITY_CLASS, for interactive
	// tasks, which a gateway the user talks to is.
	Priority int `xml:"Priority"`
	// "RestartOnFailure (settingsType) Element" (restartType): Interval
	// at least PT1M, at most P31D; Count at least 1; both required.
	RestartOnFailure struct {
		Interval string `xml:"Interval"`
		Count    int    `xml:"Count"`
	} `xml:"RestartOnFailure"`
}

// Settings of every task (the values XML writes).
const (
	principalID   = "Author"
	restartCount  = 3
	restartEvery  = "PT1M" // ISO 8601 duration, as the schema's
	noTimeLimit   = "PT0S"
	priority      = 5
	schemaVersion = "1.2"
)

// XML returns the task definition: a Task Scheduler schema 1.2 document
// (namespace Namespace) encoded as UTF-16LE with a byte-order mark (FF FE)
// and declared encoding="UTF-16", which is what schtasks /Create /XML
// reads. The elements:
//
//   - Triggers: one LogonTrigger with UserId UserID.
//   - Principals: one Principal (id "Author") with UserId UserID,
//     LogonType InteractiveToken and RunLevel LeastPrivilege.
//   - Settings: MultipleInstancesPolicy IgnoreNew,
//     DisallowStartIfOnBatteries and StopIfGoingOnBatteries false,
//     ExecutionTimeLimit PT0S, Priority 5, RestartOnFailure every PT1M
//     3 times, Enabled.
//   - Actions (Context "Author"): one Exec with Command Exe, Arguments
//     Args composed into one command line (each argument quoted as
//     CommandLineToArgvW and the C runtime parse it, "Parsing C++
//     command-line arguments"; the program reads back exactly Args) and
//     WorkingDirectory WorkingDir when set. Text is XML-escaped.
//
// Errors (nothing is returned with one): Name not [a-z][a-z0-9-]{0,23};
// UserID not an account SID (see validSID); Exe or WorkingDir not an
// absolute drive path (X:\...) with plain components; a '%' in Exe, Args
// or WorkingDir (Task Scheduler expands environment variables in Command,
// Arguments and WorkingDirectory, "Exec (actionGroup) Element" remarks,
// and has no escape for it); a character XML 1.0 cannot carry (NUL and
// most controls, invalid UTF-8) anywhere.
func (t Task) XML() ([]byte, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	var d taskXML
	d.Version, d.Xmlns = schemaVersion, Namespace
	d.RegistrationInfo.URI = TaskName(t.Name)
	d.RegistrationInfo.Description = t.Description
	if d.RegistrationInfo.Description == "" {
		d.RegistrationInfo.Description = "corral service " + t.Name + " (an agent gateway in a Corral session)"
	}
	d.Triggers.LogonTrigger.Enabled = true
	d.Triggers.LogonTrigger.UserID = t.UserID
	p := &d.Principals.Principal
	p.ID, p.UserID, p.LogonType, p.RunLevel = principalID, t.UserID, "InteractiveToken", "LeastPrivilege"
	d.Settings = settingsXML{
		MultipleInstancesPolicy: "IgnoreNew",
		Enabled:                 true,
		ExecutionTimeLimit:      noTimeLimit,
		Priority:                priority,
	}
	d.Settings.RestartOnFailure.Interval = restartEvery
	d.Settings.RestartOnFailure.Count = restartCount
	d.Actions.Context = principalID
	d.Actions.Exec.Command = t.Exe
	d.Actions.Exec.Arguments = ComposeArgs(t.Args)
	d.Actions.Exec.WorkingDirectory = t.WorkingDir
	body, err := xml.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	text := `<?xml version="1.0" encoding="UTF-16"?>` + "\r\n" + strings.ReplaceAll(string(body), "\n", "\r\n") + "\r\n"
	return utf16LE(text), nil
}

// bom is the UTF-16LE byte-order mark.
var bom = []byte{0xff, 0xfe}

// utf16LE encodes s (valid UTF-8) as UTF-16LE after a byte-order mark.
func utf16LE(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 0, len(bom)+2*len(u))
	b = append(b, bom...)
	for _, c := range u {
		b = append(b, byte(c), byte(c>>8))
	}
	return b
}

// checkData: xml looks like what XML returns (a UTF-16LE byte-order mark,
// an even length beyond it), so Write never stores something schtasks
// cannot read.
func checkData(xml []byte) error {
	if len(xml) <= len(bom) || !bytes.HasPrefix(xml, bom) || len(xml)%2 != 0 {
		return errors.New("is not a task definition from Task.XML (UTF-16LE with a byte-order mark)")
	}
	return nil
}

// ComposeArgs composes args, without the program, into the rest of a
// Windows command line: arguments separated by one space, each quoted as
// CommandLineToArgvW and the Microsoft C runtime parse it ("Parsing C++
// command-line arguments"): an argument that is empty or has a space or
// tab is put in double quotes; a double quote in it is preceded by a
// backslash, and the backslashes before a double quote (its own, or the
// closing one) are doubled; other backslashes are literal. It is
// windows.EscapeArg's quoting, portably.
func ComposeArgs(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		quote := a == "" || strings.ContainsAny(a, " \t")
		if quote {
			b.WriteByte('"')
		}
		slashes := 0
		for j := 0; j < len(a); j++ {
			switch a[j] {
			case '\\':
				slashes++
			case '"':
				b.WriteString(strings.Repeat(`\`, slashes+1))
				slashes = 0
			default:
				slashes = 0
			}
			b.WriteByte(a[j])
		}
		if quote {
			b.WriteString(strings.Repeat(`\`, slashes))
			b.WriteByte('"')
		}
	}
	return b.String()
}

// nameRE is a corral service name.
var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9-]{0,23}$`) })

// validName: name is a corral service name, which the task's name and the
// definition's file name are made of.
func validName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("service name %q is not [a-z][a-z0-9-]{0,23}", name)
	}
	return nil
}

func (t Task) validate() error {
	if err := validName(t.Name); err != nil {
		return err
	}
	if err := validSID(t.UserID); err != nil {
		return fmt.Errorf("task %s: UserID %q %v", t.Name, t.UserID, err)
	}
	if err := winPath(t.Exe, false); err != nil {
		return fmt.Errorf("task %s: Exe %q %v", t.Name, t.Exe, err)
	}
	if t.WorkingDir != "" {
		if err := winPath(t.WorkingDir, true); err != nil {
			return fmt.Errorf("task %s: WorkingDir %q %v", t.Name, t.WorkingDir, err)
		}
	}
	for i, a := range t.Args {
		if err := xmlText(a); err != nil {
			return fmt.Errorf("task %s: argument %d %v", t.Name, i, err)
		}
		if strings.Contains(a, "%") {
			return fmt.Errorf("task %s: argument %d has a %%, which Task Scheduler would expand as an environment variable", t.Name, i)
		}
	}
	if err := xmlText(t.Description); err != nil {
		return fmt.Errorf("task %s: Description %v", t.Name, err)
	}
	return nil
}

// xmlText: s can be XML 1.0 character data as it is (valid UTF-8, every
// rune a Char: tab, LF, CR, U+0020-U+D7FF, U+E000-U+FFFD,
// U+10000-U+10FFFF; "Extensible Markup Language (XML) 1.0", 2.2
// Characters). encoding/xml would write U+FFFD for the others.
func xmlText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range s {
		if !(r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0xd7ff || r >= 0xe000 && r <= 0xfffd || r >= 0x10000 && r <= 0x10ffff) {
			return fmt.Errorf("has %U, which XML cannot carry", r)
		}
	}
	return nil
}

// winPath: p is an absolute Windows path on a drive, X:\a\b, as Task
// Scheduler runs it and Check inspects it: no UNC or device path (\\...,
// whose content is another machine's or a device's), no / separators, no
// empty, "." or ".." component, none of the characters Windows file names
// cannot have (< > : " | ? * and controls, "Naming Files, Paths, and
// Namespaces"), and no % (expanded by Task Scheduler). dir allows the
// drive's root, X:\.
func winPath(p string, dir bool) error {
	if len(p) < 3 || !('a' <= p[0]|0x20 && p[0]|0x20 <= 'z') || p[1] != ':' || p[2] != '\\' {
		return errors.New(`is not an absolute Windows path on a drive (X:\...)`)
	}
	rest := p[3:]
	if rest == "" && dir {
		return nil
	}
	if err := xmlText(rest); err != nil {
		return err
	}
	for _, c := range strings.Split(rest, `\`) {
		if c == "" || c == "." || c == ".." {
			return errors.New(`has an empty, "." or ".." component`)
		}
		if i := strings.IndexFunc(c, func(r rune) bool { return r < 0x20 || strings.ContainsRune(`<>:"/|?*%`, r) }); i >= 0 {
			return fmt.Errorf("has %q, which a Windows file name cannot have or Task Scheduler would expand", c[i:i+1])
		}
	}
	return nil
}

// validSID: s is an account SID in string form ("Security identifiers",
// Microsoft Learn: S-1-<authority>-<subauthority>..., authority below
// 2^48, 1 to 15 32-bit subauthorities), and one of a user account: a local
// or domain account's S-1-5-21-x-y-z-RID or a Microsoft Entra ID
// account's S-1-12-1-a-b-c-d. A well-known SID is refused: a logon task
// for SYSTEM (S-1-5-18), a service account or a group would run corral as
// someone other than the user who enabled it, SYSTEM with full privilege.
func validSID(s string) error {
	p := strings.Split(s, "-")
	if len(p) < 4 || p[0] != "S" || p[1] != "1" || len(p) > 3+15 {
		return errors.New("is not a SID (S-1-AUTHORITY-SUB..., 1 to 15 subauthorities)")
	}
	for i, v := range p[2:] {
		bits := 32
		if i == 0 {
			bits = 48
		}
		if v == "" || strings.TrimLeft(v, "0123456789") != "" {
			return errors.New("is not a SID (S-1-AUTHORITY-SUB..., decimal numbers)")
		}
		if _, err := strconv.ParseUint(v, 10, bits); err != nil {
			return fmt.Errorf("is not a SID (%s is out of range)", v)
		}
	}
	if len(p) != 8 || !(p[2] == "5" && p[3] == "21" || p[2] == "12" && p[3] == "1") {
		return errors.New("is not a user account's SID (S-1-5-21-x-y-z-RID or S-1-12-1-a-b-c-d)")
	}
	return nil
}
