package policy

import (
	"sort"
	"strconv"
	"strings"
)

// Error is one problem with a policy: a syntax or type error, an unknown
// field, a value that fails validation (Parse), or a host check that fails
// (Resolve). Line and Column are 1-based and zero when unknown (a policy
// built in code, or a problem with the whole file). Field is the path of the
// offending value, e.g. "filesystem.read_only[2]"; it is empty for
// file-level problems.
type Error struct {
	File   string // the policy file, as given to Load or Parse; may be empty
	Line   int
	Column int
	Field  string
	Msg    string // what is wrong
	Hint   string // how to fix it; may be empty
	Err    error  // underlying cause (e.g. an *fs.PathError), if any
}

// Error formats the problem as "FILE:LINE:COL: FIELD: MSG (hint: HINT)",
// leaving out the parts that are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	loc := e.File
	if e.Line > 0 {
		if loc != "" {
			loc += ":"
		}
		loc += strconv.Itoa(e.Line)
		if e.Column > 0 {
			loc += ":" + strconv.Itoa(e.Column)
		}
	}
	if loc != "" {
		b.WriteString(loc)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString(" (hint: ")
		b.WriteString(e.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// Errors is several problems, in file order. Load, Parse and Resolve return
// it (never empty) when there is more than one problem, and a single *Error
// otherwise. errors.As(err, new(*Error)) finds the first.
type Errors []*Error

// Error formats one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual errors.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// asError turns a problem list into nil, one *Error, or Errors sorted by
// position (stable, so unpositioned problems keep their order).
func asError(es []*Error) error {
	switch len(es) {
	case 0:
		return nil
	case 1:
		return es[0]
	}
	sorted := append(Errors(nil), es...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	return sorted
}
