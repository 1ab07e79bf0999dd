package wintask

import (
	"bytes"
	"encoding/xml"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
)

const testSID = "S-1-5-21-1004336348-1177238915-682003330-1001"

// testTask is a task whose arguments need every quoting rule: a space, a
// double quote, backslashes before a quote and at the end.
func testTask() Task {
	return Task{
		Name:       "gw-1",
		Exe:        `C:\Program Files\corral\corral.exe`,
		Args:       []string{"service", "start", "gw-1", `say "hi" there`, `C:\dir with space\`, `a\\"b`, ""},
		UserID:     testSID,
		WorkingDir: `C:\Users\alice`,
	}
}

// testXML is testTask's definition.
func testXML(t *testing.T) []byte {
	t.Helper()
	b, err := testTask().XML()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode is XML's output as text: the UTF-16LE byte-order mark checked
// and dropped, the rest decoded (unicode/utf16: golang.org/x/text is only
// an indirect requirement of go.mod, and a test's import would make it a
// direct one).
func decode(t *testing.T, b []byte) string {
	t.Helper()
	if len(b) < 2 || b[0] != 0xff || b[1] != 0xfe || len(b)%2 != 0 {
		t.Fatalf("XML does not start with a UTF-16LE byte-order mark or has an odd length: % x", b[:min(len(b), 8)])
	}
	u := make([]uint16, 0, len(b)/2-1)
	for i := 2; i < len(b); i += 2 {
		u = append(u, uint16(b[i])|uint16(b[i+1])<<8)
	}
	return string(utf16.Decode(u))
}

// parsedTask is what the tests read back, written from the schema's
// element names independently of the package's own structs.
type parsedTask struct {
	XMLName xml.Name
	Version string `xml:"version,attr"`
	URI     string `xml:"RegistrationInfo>URI"`
	Logon   []struct {
		Enabled string `xml:"Enabled"`
		UserID  string `xml:"UserId"`
	} `xml:"Triggers>LogonTrigger"`
	Principal []struct {
		ID        string `xml:"id,attr"`
		UserID    string `xml:"UserId"`
		LogonType string `xml:"LogonType"`
		RunLevel  string `xml:"RunLevel"`
	} `xml:"Principals>Principal"`
	Settings struct {
		MultipleInstancesPolicy    string `xml:"MultipleInstancesPolicy"`
		DisallowStartIfOnBatteries string `xml:"DisallowStartIfOnBatteries"`
		StopIfGoingOnBatteries     string `xml:"StopIfGoingOnBatteries"`
		ExecutionTimeLimit         string `xml:"ExecutionTimeLimit"`
		RestartInterval            string `xml:"RestartOnFailure>Interval"`
		RestartCount               string `xml:"RestartOnFailure>Count"`
	} `xml:"Settings"`
	Actions struct {
		Context string `xml:"Context,attr"`
		Exec    []struct {
			Command          string `xml:"Command"`
			Arguments        string `xml:"Arguments"`
			WorkingDirectory string `xml:"WorkingDirectory"`
		} `xml:"Exec"`
	} `xml:"Actions"`
}

// parse decodes XML's output and parses it with encoding/xml.
func parse(t *testing.T, b []byte) (parsedTask, string) {
	t.Helper()
	text := decode(t, b)
	if !strings.HasPrefix(text, `<?xml version="1.0" encoding="UTF-16"?>`) {
		t.Errorf("the declaration is not UTF-16's: %.60q", text)
	}
	d := xml.NewDecoder(strings.NewReader(text))
	d.CharsetReader = func(label string, r io.Reader) (io.Reader, error) { return r, nil } // decoded already
	var p parsedTask
	if err := d.Decode(&p); err != nil {
		t.Fatalf("XML does not parse back: %v\n%s", err, text)
	}
	return p, text
}

// XML is a Task Scheduler 1.2 document with the logon trigger and the
// principal of the task's user, least privilege and the interactive token,
// the settings asked for, and the program with its arguments.
func TestXML(t *testing.T) {
	task := testTask()
	p, text := parse(t, testXML(t))
	if p.XMLName.Space != Namespace || p.XMLName.Local != "Task" || p.Version != "1.2" {
		t.Errorf("root = %v version %q, want Task in %s, 1.2", p.XMLName, p.Version, Namespace)
	}
	if p.URI != `\Corral\corral-service-gw-1` {
		t.Errorf("URI = %q", p.URI)
	}
	if len(p.Logon) != 1 || p.Logon[0].UserID != testSID || p.Logon[0].Enabled != "true" {
		t.Errorf("LogonTrigger = %+v, want one, enabled, UserId %s", p.Logon, testSID)
	}
	if len(p.Principal) != 1 || p.Principal[0].UserID != testSID || p.Principal[0].LogonType != "InteractiveToken" ||
		p.Principal[0].RunLevel != "LeastPrivilege" || p.Principal[0].ID != p.Actions.Context || p.Actions.Context == "" {
		t.Errorf("Principal = %+v (Actions Context %q), want one, UserId %s, InteractiveToken, LeastPrivilege, the Actions' context", p.Principal, p.Actions.Context, testSID)
	}
	s := p.Settings
	if s.MultipleInstancesPolicy != "IgnoreNew" || s.DisallowStartIfOnBatteries != "false" || s.StopIfGoingOnBatteries != "false" ||
		s.ExecutionTimeLimit != "PT0S" || s.RestartInterval != "PT1M" || s.RestartCount != "3" {
		t.Errorf("Settings = %+v", s)
	}
	if len(p.Actions.Exec) != 1 || p.Actions.Exec[0].Command != task.Exe || p.Actions.Exec[0].WorkingDirectory != task.WorkingDir {
		t.Fatalf("Exec = %+v, want one running %s in %s", p.Actions.Exec, task.Exe, task.WorkingDir)
	}
	want := `service start gw-1 "say \"hi\" there" "C:\dir with space\\" a\\\\\"b ""`
	if p.Actions.Exec[0].Arguments != want {
		t.Errorf("Arguments = %s, want %s", p.Actions.Exec[0].Arguments, want)
	}
	if strings.Contains(text, `"hi"`) {
		t.Errorf("a double quote of the arguments is in the text unescaped:\n%s", text)
	}
}

// The description is escaped, not markup, and defaults to one naming the
// service.
func TestXMLDescription(t *testing.T) {
	task := testTask()
	task.Description = `</Description><Evil>&`
	b, err := task.XML()
	if err != nil {
		t.Fatal(err)
	}
	_, text := parse(t, b)
	if strings.Contains(text, "<Evil>") || !strings.Contains(text, "&lt;/Description&gt;&lt;Evil&gt;&amp;") {
		t.Errorf("the description is not escaped:\n%s", text)
	}
	task.Description = ""
	b, _ = task.XML()
	if _, text := parse(t, b); !strings.Contains(text, "<Description>corral service gw-1 (") {
		t.Errorf("no default description:\n%s", text)
	}
}

// XML refuses what would make a wrong or dangerous task: a relative or
// non-drive program, a bad SID or one that is no user account's, a bad
// name, a '%' Task Scheduler would expand, text XML cannot carry.
func TestXMLRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		mod  func(*Task)
		want string
	}{
		"relative exe":      {func(t *Task) { t.Exe = `corral.exe` }, "absolute"},
		"rooted exe":        {func(t *Task) { t.Exe = `\corral\corral.exe` }, "absolute"},
		"drive-relative":    {func(t *Task) { t.Exe = `C:corral.exe` }, "absolute"},
		"unc exe":           {func(t *Task) { t.Exe = `\\host\share\corral.exe` }, "absolute"},
		"device exe":        {func(t *Task) { t.Exe = `\\?\C:\corral.exe` }, "absolute"},
		"posix exe":         {func(t *Task) { t.Exe = `/usr/bin/corral` }, "absolute"},
		"dotdot exe":        {func(t *Task) { t.Exe = `C:\a\..\corral.exe` }, `".."`},
		"dir exe":           {func(t *Task) { t.Exe = `C:\` }, "component"},
		"quote exe":         {func(t *Task) { t.Exe = `C:\a"b\corral.exe` }, "cannot have"},
		"percent exe":       {func(t *Task) { t.Exe = `C:\%TEMP%\corral.exe` }, "expand"},
		"relative workdir":  {func(t *Task) { t.WorkingDir = `home` }, "absolute"},
		"percent arg":       {func(t *Task) { t.Args = []string{"%USERPROFILE%"} }, "expand"},
		"nul arg":           {func(t *Task) { t.Args = []string{"a\x00b"} }, "XML cannot carry"},
		"control arg":       {func(t *Task) { t.Args = []string{"a\x1bb"} }, "XML cannot carry"},
		"bad utf-8":         {func(t *Task) { t.Description = "\xff" }, "UTF-8"},
		"empty sid":         {func(t *Task) { t.UserID = "" }, "not a SID"},
		"name as sid":       {func(t *Task) { t.UserID = `DOMAIN\alice` }, "not a SID"},
		"sid letters":       {func(t *Task) { t.UserID = "S-1-5-21-1-2-x-1001" }, "not a SID"},
		"sid overflow":      {func(t *Task) { t.UserID = "S-1-5-21-1-2-4294967296-1001" }, "out of range"},
		"sid revision":      {func(t *Task) { t.UserID = "S-2-5-21-1-2-3-1001" }, "not a SID"},
		"system sid":        {func(t *Task) { t.UserID = "S-1-5-18" }, "user account"},
		"administrators":    {func(t *Task) { t.UserID = "S-1-5-32-544" }, "user account"},
		"domain sid no rid": {func(t *Task) { t.UserID = "S-1-5-21-1-2-3" }, "user account"},
		"empty name":        {func(t *Task) { t.Name = "" }, "service name"},
		"upper name":        {func(t *Task) { t.Name = "GW" }, "service name"},
		"long name":         {func(t *Task) { t.Name = "a23456789012345678901234x" }, "service name"},
		"digit first":       {func(t *Task) { t.Name = "1gw" }, "service name"},
		"path name":         {func(t *Task) { t.Name = `gw\..\x` }, "service name"},
	} {
		task := testTask()
		c.mod(&task)
		b, err := task.XML()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: XML() = %d bytes, %v; want an error with %q", name, len(b), err, c.want)
		}
	}
	for _, ok := range []func(*Task){
		func(t *Task) { t.UserID = "S-1-12-1-3406401234-1234567890-987654321-1234567890" }, // Entra ID
		func(t *Task) { t.Name = "a23456789012345678901234" },                              // 24 characters
		func(t *Task) { t.WorkingDir = `D:\` },
		func(t *Task) { t.Args = nil },
	} {
		task := testTask()
		ok(&task)
		if _, err := task.XML(); err != nil {
			t.Errorf("XML() of %+v: %v", task, err)
		}
	}
}

func TestNames(t *testing.T) {
	if got := TaskName("gw"); got != `\Corral\corral-service-gw` {
		t.Errorf("TaskName = %q", got)
	}
	if got, want := Path(filepath.Join("d", "e"), "gw"), filepath.Join("d", "e", "corral-service-gw.xml"); got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
}

// checkData refuses what is not XML's output, which Write relies on.
func TestCheckData(t *testing.T) {
	b, _ := testTask().XML()
	if err := checkData(b); err != nil {
		t.Errorf("checkData(XML()) = %v", err)
	}
	for _, bad := range [][]byte{nil, {0xff, 0xfe}, []byte("<Task/>"), append(bytes.Clone(b), 0)} {
		if checkData(bad) == nil {
			t.Errorf("checkData(% x) accepted", bad[:min(len(bad), 8)])
		}
	}
}
