package mxc

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	cases := []struct {
		name, text string
		secrets    []string
		want       string
	}{
		{"none", "hello world", nil, "hello world"},
		{"one", "token=s3cr3t!", []string{"s3cr3t"}, "token=[REDACTED]!"},
		{"every occurrence", "ab s3cr3t cd s3cr3t", []string{"s3cr3t"}, "ab [REDACTED] cd [REDACTED]"},
		{"short values kept", "on abc C:\\ x", []string{"on", "abc", `C:\`, ""}, "on abc C:\\ x"},
		{"four bytes redacted", "pin 1234.", []string{"1234"}, "pin [REDACTED]."},
		// "abcdef" contains "abcd" and "cdef", which overlap: one span,
		// no fragment of either left.
		{"overlapping secrets", "x abcdef y", []string{"abcd", "cdef"}, "x [REDACTED] y"},
		{"overlap chain", "1abcdefgh2", []string{"abcd", "cdef", "efgh"}, "1[REDACTED]2"},
		{"self overlap", "aaaaaa", []string{"aaaa"}, "[REDACTED]"},
		{"nested", "xxLONGSECRETxx", []string{"LONGSECRET", "SECR"}, "xx[REDACTED]xx"},
		{"adjacent", "abcdwxyz", []string{"abcd", "wxyz"}, "[REDACTED][REDACTED]"},
		{"duplicates", "k=vvvv", []string{"vvvv", "vvvv"}, "k=[REDACTED]"},
		{"multibyte", "clé=häßlich!", []string{"häßlich"}, "clé=[REDACTED]!"},
	}
	for _, c := range cases {
		if got := Redact(c.text, c.secrets); got != c.want {
			t.Errorf("%s: Redact(%q, %q) = %q, want %q", c.name, c.text, c.secrets, got, c.want)
		}
	}
}

// The streaming redactor must give the same text as Redact whatever the
// write boundaries: secrets split across writes, overlapping spans
// straddling the held-back tail.
func TestRedactWriterSplits(t *testing.T) {
	secrets := []string{"abcd", "cdef", "s3cr3t-value", "efgh"}
	texts := []string{
		"plain text without anything\n",
		"x abcdefgh y s3cr3t-value z\n",
		"s3cr3t-values3cr3t-value abcdabcd cdefcdef\n",
		"abcdefghabcdefgh",
		"tail ends in a partial s3cr3t-val",
	}
	for _, text := range texts {
		want := Redact(text, secrets)
		for size := 1; size <= len(text); size++ {
			var out bytes.Buffer
			w := newRedactWriter(&out, secrets)
			for i := 0; i < len(text); i += size {
				end := min(i+size, len(text))
				if _, err := w.Write([]byte(text[i:end])); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != want {
				t.Fatalf("writes of %d bytes: got %q, want %q", size, out.String(), want)
			}
		}
	}
}

// The stderr filter withholds an envelope line, forwards the rest redacted
// and keeps a partial non-JSON line flowing.
func TestStderrFilter(t *testing.T) {
	var out bytes.Buffer
	f := &stderrFilter{out: newRedactWriter(&out, []string{"hunter22"})}
	in := "progress 10%" + " and 20%\n" +
		`{"error":{"code":"backend_error","message":"boom hunter22"}}` + "\n" +
		"{not an envelope}\n" +
		"pass=hunter22\n"
	for i := 0; i < len(in); i += 7 {
		f.Write([]byte(in[i:min(i+7, len(in))]))
	}
	f.Close()
	want := "progress 10% and 20%\n{not an envelope}\npass=[REDACTED]\n"
	if out.String() != want {
		t.Errorf("forwarded %q, want %q", out.String(), want)
	}
	if f.env == nil || f.env.Error.Code != "backend_error" {
		t.Fatalf("envelope not kept: %+v", f.env)
	}
	if strings.Contains(out.String(), "backend_error") {
		t.Error("envelope line was forwarded")
	}
}

func TestEnvSecretsSkipsPublicVariables(t *testing.T) {
	req := &Request{Process: &Process{Env: []string{
		"PATH=C:\\Windows\\System32", "Term=xterm-256color", "LC_ALL=C.UTF-8", "API_TOKEN=tok-123456", "PATHX=also-a-secret", "LC_TOKEN=lc-secret",
	}}}
	got := envSecrets(req)
	want := []string{"tok-123456", "also-a-secret", "lc-secret"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("envSecrets = %q, want %q", got, want)
	}
	if out := Redact("TERM is xterm-256color, token tok-123456", got); strings.Contains(out, "tok-123456") || !strings.Contains(out, "xterm-256color") {
		t.Fatalf("Redact = %q: want the token masked and the terminal name kept", out)
	}
}
