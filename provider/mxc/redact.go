package mxc

import (
	"io"
	"sort"
	"strings"
)

// Redacted replaces each redacted span.
const Redacted = "[REDACTED]"

// minSecret is the shortest value redacted: shorter values ("1", "on",
// "C:\") would mangle ordinary text and protect nothing.
const minSecret = 4

// Redact replaces every literal occurrence in text of each secret of at
// least 4 bytes with "[REDACTED]". Occurrences that overlap (of one secret,
// as "aaaa" twice in "aaaaa", or of two secrets sharing bytes) are merged
// and replaced by a single "[REDACTED]", so no fragment of either survives.
// Adjacent, non-overlapping occurrences are replaced one by one.
func Redact(text string, secrets []string) string {
	iv := matches(text, secrets)
	if len(iv) == 0 {
		return text
	}
	var b strings.Builder
	last := 0
	for _, m := range iv {
		b.WriteString(text[last:m[0]])
		b.WriteString(Redacted)
		last = m[1]
	}
	b.WriteString(text[last:])
	return b.String()
}

// secretSet keeps the secrets worth redacting, longest first, without
// duplicates.
func secretSet(secrets []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range secrets {
		if len(s) >= minSecret && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// matches returns the merged [start, end) intervals of every occurrence of
// every secret in text, sorted.
func matches(text string, secrets []string) [][2]int {
	var iv [][2]int
	for _, s := range secretSet(secrets) {
		for off := 0; off < len(text); {
			i := strings.Index(text[off:], s)
			if i < 0 {
				break
			}
			iv = append(iv, [2]int{off + i, off + i + len(s)})
			off += i + 1 // overlapping occurrences of the same secret too
		}
	}
	if len(iv) == 0 {
		return nil
	}
	sort.Slice(iv, func(i, j int) bool { return iv[i][0] < iv[j][0] })
	out := iv[:1]
	for _, m := range iv[1:] {
		cur := &out[len(out)-1]
		if m[0] < cur[1] { // overlap: one span
			if m[1] > cur[1] {
				cur[1] = m[1]
			}
			continue
		}
		out = append(out, m)
	}
	return out
}

// redactWriter redacts a stream: it holds back just enough bytes that a
// secret split across writes is still caught, and never emits part of a
// span that a later match could extend. Flush emits the rest.
type redactWriter struct {
	w       io.Writer
	secrets []string
	max     int
	buf     []byte
}

func newRedactWriter(w io.Writer, secrets []string) *redactWriter {
	s := secretSet(secrets)
	rw := &redactWriter{w: w, secrets: s}
	if len(s) > 0 {
		rw.max = len(s[0])
	}
	return rw
}

func (r *redactWriter) Write(p []byte) (int, error) {
	if r.max == 0 {
		return r.w.Write(p)
	}
	r.buf = append(r.buf, p...)
	// Every occurrence starting before cut is wholly inside buf, so the
	// bytes before cut are final, except a merged span crossing cut,
	// which a later occurrence could still extend: keep it whole.
	cut := len(r.buf) - (r.max - 1)
	if cut <= 0 {
		return len(p), nil
	}
	text := string(r.buf)
	iv := matches(text, r.secrets)
	for _, m := range iv {
		if m[0] < cut && cut < m[1] {
			cut = m[0]
		}
	}
	if err := r.emit(text[:cut], iv); err != nil {
		return 0, err
	}
	r.buf = append(r.buf[:0], r.buf[cut:]...)
	return len(p), nil
}

// emit writes head (a prefix of the buffered text) redacted with the
// buffer's intervals iv.
func (r *redactWriter) emit(head string, iv [][2]int) error {
	var b strings.Builder
	last := 0
	for _, m := range iv {
		if m[1] > len(head) {
			break
		}
		b.WriteString(head[last:m[0]])
		b.WriteString(Redacted)
		last = m[1]
	}
	b.WriteString(head[last:])
	if b.Len() == 0 {
		return nil
	}
	_, err := io.WriteString(r.w, b.String())
	return err
}

// Flush writes what is held back, redacted.
func (r *redactWriter) Flush() error {
	if len(r.buf) == 0 {
		return nil
	}
	out := Redact(string(r.buf), r.secrets)
	r.buf = r.buf[:0]
	_, err := io.WriteString(r.w, out)
	return err
}
