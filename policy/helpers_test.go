package policy

import (
	"errors"
	"strings"
	"testing"
)

// problems returns the individual errors of err (an *Error or Errors).
func problems(t *testing.T, err error) []*Error {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error, got nil")
	}
	var es Errors
	if errors.As(err, &es) {
		return es
	}
	var e *Error
	if errors.As(err, &e) {
		return []*Error{e}
	}
	t.Fatalf("error %v (%T) is neither *Error nor Errors", err, err)
	return nil
}

// only asserts that err holds exactly one problem and returns it.
func only(t *testing.T, err error) *Error {
	t.Helper()
	es := problems(t, err)
	if len(es) != 1 {
		t.Fatalf("want 1 problem, got %d:\n%v", len(es), err)
	}
	return es[0]
}

func expectAt(t *testing.T, e *Error, field string, line, col int, msgPart string) {
	t.Helper()
	if e.Field != field || e.Line != line || e.Column != col || !strings.Contains(e.Msg, msgPart) {
		t.Errorf("got %s:%d:%d field %q msg %q; want %d:%d field %q msg containing %q",
			e.File, e.Line, e.Column, e.Field, e.Msg, line, col, field, msgPart)
	}
}
