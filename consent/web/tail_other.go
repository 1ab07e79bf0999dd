//go:build !unix

package web

// Windows has neither flag; TailFile checks the opened file is regular.
const (
	oNoFollow = 0
	oNonBlock = 0
)
