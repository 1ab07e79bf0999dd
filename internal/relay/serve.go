package relay

import (
	"context"
	"errors"
	"io"
)

// Serve is the relay: it says hello on out, then runs what the host asks on
// in until in reaches EOF (nil), ctx ends, or the channel breaks (the
// error). Before returning it kills every process it started and closes
// every connection. Processes get pipes for stdio, never in or out.
func Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	return errors.New("relay: not implemented")
}
