package relay

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

const (
	// Version is the protocol version this package speaks.
	Version = 1
	// MaxFrame is the longest line, newline included, either side accepts.
	MaxFrame = 1 << 20
	// MaxChunk is the most payload bytes (decoded) one in/out/data frame carries.
	MaxChunk = 32 << 10
	// Window is the most payload bytes of one direction of one id that may
	// be sent and not yet acked.
	Window = 256 << 10
	// MainID is the id of the main command.
	MainID = "main"
	// maxID bounds ids, which the host chooses.
	maxID = 64
)

// Frame types.
const (
	tHello  = "hello"
	tStart  = "start"
	tReady  = "ready"
	tExec   = "exec"
	tIn     = "in"
	tEOF    = "eof"
	tSignal = "signal"
	tOut    = "out"
	tExit   = "exit"
	tOpen   = "open"
	tOpened = "opened"
	tClosed = "closed"
	tData   = "data"
	tClose  = "close"
	tAck    = "ack"
	tError  = "error"
)

// frame is every frame type's fields; the type says which mean something.
type frame struct {
	T             string   `json:"t"`
	V             int      `json:"v,omitempty"`
	PID           int      `json:"pid,omitempty"`
	ID            string   `json:"id,omitempty"`
	Args          []string `json:"args,omitempty"`
	Env           []string `json:"env,omitempty"`
	Dir           string   `json:"dir,omitempty"`
	WaitPort      int      `json:"wait_port,omitempty"`
	WaitTimeoutMS int64    `json:"wait_timeout_ms,omitempty"`
	FD            int      `json:"fd,omitempty"`
	Data          []byte   `json:"data,omitempty"`
	N             int      `json:"n,omitempty"`
	Code          int      `json:"code,omitempty"`
	Signal        string   `json:"signal,omitempty"`
	Sig           string   `json:"sig,omitempty"`
	Port          int      `json:"port,omitempty"`
	Nonce         string   `json:"nonce,omitempty"`
	Error         string   `json:"error,omitempty"`
}

// ProtocolError is a peer's breach of the protocol; it ends the channel.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "relay protocol: " + e.Msg }

func protoErr(format string, a ...any) error { return &ProtocolError{Msg: fmt.Sprintf(format, a...)} }

// readFrame reads one line of at most MaxFrame bytes and decodes it. A
// clean EOF between frames is io.EOF.
func readFrame(br *bufio.Reader) (*frame, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxFrame {
			return nil, protoErr("a frame longer than %d bytes", MaxFrame)
		}
		line = append(line, chunk...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF && len(line) > 0 {
			return nil, protoErr("the channel ended inside a frame")
		}
		return nil, err
	}
	var f frame
	if err := json.Unmarshal(line, &f); err != nil {
		return nil, protoErr("a frame that is not a JSON object: %v", err)
	}
	if f.T == "" {
		return nil, protoErr("a frame without a type")
	}
	if len(f.Data) > MaxChunk {
		return nil, protoErr("a %s frame carrying %d bytes (at most %d)", f.T, len(f.Data), MaxChunk)
	}
	// A payload frame carries at least one byte (no side sends an empty
	// one): empty ones would pass every window and pile up in an inbox
	// without bound, and their ack of 0 bytes is itself an error.
	if (f.T == tIn || f.T == tOut || f.T == tData) && len(f.Data) == 0 {
		return nil, protoErr("an empty %s frame", f.T)
	}
	return &f, nil
}

// writer serialises frames onto the channel; the first failed write sticks.
type writer struct {
	mu      sync.Mutex
	w       io.Writer
	err     error
	stopped atomic.Bool
}

var errStopped = errors.New("relay: channel closed")

// stop drops every later frame (without waiting for a write under way).
func (w *writer) stop() { w.stopped.Store(true) }

func (w *writer) send(f *frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if len(b)+1 > MaxFrame {
		return fmt.Errorf("relay: a %s frame of %d bytes is over the %d-byte limit", f.T, len(b)+1, MaxFrame)
	}
	b = append(b, '\n')
	if w.stopped.Load() {
		return errStopped
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.stopped.Load() {
		return errStopped
	}
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("relay: writing the channel: %w", err)
	}
	return w.err
}

func newReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }
