//go:build !windows

// Linux policies: their paths resolve on a Linux host only (a Windows host
// refuses them). The Windows policy tests are winpath_test.go and
// winresolve_windows_test.go.

package policy

import (
	"go/doc/comment"
	"os"
	"strings"
	"testing"
)

// TestPackageDocExample parses the example policy of the package comment:
// it must fail only on the line marked as an error.
func TestPackageDocExample(t *testing.T) {
	src, err := os.ReadFile("types.go")
	if err != nil {
		t.Fatal(err)
	}
	var text []string
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "//") {
			break
		}
		text = append(text, strings.TrimPrefix(strings.TrimPrefix(line, "//"), " "))
	}
	var example string
	for _, b := range new(comment.Parser).Parse(strings.Join(text, "\n")).Content {
		if c, ok := b.(*comment.Code); ok {
			example = c.Text
		}
	}
	if !strings.HasPrefix(example, "version: 1") {
		t.Fatalf("no example found in the package comment: %q", example)
	}
	_, err = Parse([]byte(example), "doc")
	e := only(t, err)
	if e.Field != "filesystem.read_write[1]" || !strings.Contains(e.Msg, `".."`) {
		t.Errorf("doc example: %v", err)
	}
	fixed := strings.Replace(example, `, "{workdir}/../x"`, "", 1)
	if _, err := Parse([]byte(fixed), "doc"); err != nil {
		t.Errorf("doc example without the error line: %v", err)
	}
}
