package service

import (
	"fmt"
	"io"
	"strings"
)

// Printable returns s with every control character but newline and tab
// (escape sequences among them: a workload's output must not drive the
// operator's terminal) written as \xNN, and invalid UTF-8 as \ufffd.
func Printable(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\ufffd") {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			fmt.Fprintf(&b, `\x%02x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// PrintableWriter passes what is written through Printable (for output to
// a terminal). Writes are per chunk: a multi-byte character split across
// two writes shows as \ufffd.
type PrintableWriter struct{ W io.Writer }

func (p PrintableWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.W, Printable(string(b))); err != nil {
		return 0, err
	}
	return len(b), nil
}
