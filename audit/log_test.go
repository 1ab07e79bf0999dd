package audit

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A workload that sends MaxDenied+50 denied requests and then one allowed
// request leaves the allowed one in the log (the one that can carry data
// out), the denials beyond the window as aggregates with OCSF count, and
// Stats says so.
func TestLogKeepsEveryAllowedDecision(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	l, err := OpenLog(path, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for i := 0; i < MaxDenied+50; i++ {
		l.Egress(RunInfo{}, EgressDecision{Time: t0, Host: "d" + strconv.Itoa(i%2) + ".test", Port: 80, Reason: "no allow rule matches"})
	}
	l.Egress(RunInfo{}, EgressDecision{Time: t0, Allowed: true, Method: "CONNECT", Host: "exfil.test", Port: 443})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Allowed != 1 || st.Denied != MaxDenied+50 || st.Aggregated != 50 {
		t.Errorf("stats %+v", st)
	}
	lines := readLines(t, path)
	allowed, counted := 0, 0.0
	for _, m := range lines {
		if m["action"] == "Allowed" && m["dst_endpoint"].(map[string]any)["hostname"] == "exfil.test" {
			allowed++
		}
		if c, ok := m["count"].(float64); ok {
			counted += c
			if m["start_time"] == nil || m["end_time"] == nil || m["message"] == "" {
				t.Errorf("aggregate without its period or message: %v", m)
			}
		}
	}
	if allowed != 1 || counted != 50 || len(lines) != MaxDenied+1+2 {
		t.Errorf("%d lines: allowed %d, aggregated count %v", len(lines), allowed, counted)
	}
}

// Rotation at MaxBytes moves the log to PATH.1 and says so in the new
// file; a later rotation says how many events it removed.
func TestLogRotationIsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	l, err := OpenLog(path, LogOptions{MaxBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*256; i++ {
		l.Emit(Note("event " + strconv.Itoa(i)))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Rotations != 3 || st.LostInRotated != 256+257 { // checked every 256 events: the first file held 256, the second a note and 256
		t.Fatalf("stats %+v", st)
	}
	first := readLines(t, path)[0]
	if msg, _ := first["message"].(string); msg == "" || first["class_uid"].(float64) != BaseClassUID {
		t.Fatalf("first event of the rotated log: %v", first)
	}
}

// Allowed decisions beyond the window's one-by-one bound are still
// recorded, with their destination, in aggregates; Flush does not open a
// new window (an exec's end must not reset the bound).
func TestLogAggregatesAllowedBeyondBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	l, err := OpenLog(path, LogOptions{MaxDenied: 2, MaxAllowed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		l.Egress(RunInfo{}, EgressDecision{Time: time.Now(), Allowed: true, Host: "ok.test", Port: 443})
		l.Flush()
	}
	l.Egress(RunInfo{}, EgressDecision{Time: time.Now(), Allowed: true, Host: "exfil.test", Port: 443})
	_ = l.Close()
	_ = l.Close() // twice: a no-op
	var one, agg int
	exfil := false
	for _, m := range readLines(t, path) {
		if c, ok := m["count"].(float64); ok {
			agg += int(c)
			exfil = exfil || m["dst_endpoint"].(map[string]any)["hostname"] == "exfil.test"
		} else {
			one++
		}
	}
	if one != 3 || agg != 3 || !exfil {
		t.Errorf("%d one by one, %d aggregated (exfil.test among them: %v); want 3 and 3", one, agg, exfil)
	}
	if st := l.Stats(); st.Allowed != 6 || st.Aggregated != 3 {
		t.Errorf("stats %+v", st)
	}
}

// A rotation that cannot rename (PATH.1 is a directory) leaves the log
// writing where it was: nothing is lost.
func TestLogRotationFailureLosesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	if err := os.MkdirAll(path+".1/x", 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLog(path, LogOptions{MaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 600; i++ {
		l.Emit(Note("event " + strconv.Itoa(i)))
	}
	_ = l.Close()
	if n := len(readLines(t, path)); n != 600 || l.Stats().Failed != 0 {
		t.Errorf("%d events in the log, stats %+v; want 600", n, l.Stats())
	}
}

// A log reopened over an earlier process's PATH.1 says, when its first
// rotation replaces that file, that it removed those events.
func TestLogRotationNamesAnEarlierProcessFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	if err := os.WriteFile(path+".1", []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLog(path, LogOptions{MaxBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		l.Emit(Note("event " + strconv.Itoa(i)))
	}
	_ = l.Close()
	msg, _ := readLines(t, path)[0]["message"].(string)
	if !strings.Contains(msg, "earlier process") {
		t.Errorf("the rotation's note: %q", msg)
	}
}
