package relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary is also the workload: RELAY_HELPER names what it does.
func TestMain(m *testing.M) {
	if mode := os.Getenv("RELAY_HELPER"); mode != "" {
		os.Exit(helper(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helperCmd is a Command running the test binary as helper mode.
func helperCmd(mode string, args ...string) Command {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return Command{Args: append([]string{exe}, args...), Env: append(os.Environ(), "RELAY_HELPER="+mode)}
}

func helper(mode string, args []string) int {
	switch mode {
	case "cat": // stdin to stdout, "to stderr" on stderr, exit args[0]
		io.Copy(os.Stdout, os.Stdin)
		fmt.Fprint(os.Stderr, "to stderr")
		code, _ := strconv.Atoi(args[0])
		return code
	case "flood": // args[0] bytes of a counting pattern on stdout
		n, _ := strconv.Atoi(args[0])
		w := bufio.NewWriter(os.Stdout)
		for i := range n {
			w.WriteByte(byte(i % 251))
		}
		w.Flush()
		return 0
	case "http": // serve "hello from the sandbox" on 127.0.0.1:args[0]
		ln, err := net.Listen("tcp", "127.0.0.1:"+args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("listening")
		http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from the sandbox: %s", r.URL.Path)
		}))
		return 1
	case "sleep": // print the pid, then a child's (args[0] == "tree"), then block
		fmt.Println(os.Getpid())
		if len(args) > 0 && args[0] == "tree" {
			c := exec.Command(os.Args[0], "x")
			c.Env = append(os.Environ(), "RELAY_HELPER=sleep")
			c.Stdout = os.Stdout
			c.Start()
		}
		time.Sleep(time.Hour)
		return 0
	case "fds": // list the open fds and what each is
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			fmt.Printf("%s %s\n", e.Name(), l)
		}
		return 0
	case "relay": // a relay on this process's stdin and stdout, as corral __relay
		in, out, err := TakeStdio()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := Serve(context.Background(), in, out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "exit":
		return 7
	}
	return 99
}

// pair runs Serve over real pipes with a Client on the other end; the
// pipes' files are returned for inspection.
type pair struct {
	c        *Client
	served   chan error
	relayIn  *os.File // the relay's stdin (read end)
	relayOut *os.File // the relay's stdout (write end)
}

func newPair(t *testing.T) *pair {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{served: make(chan error, 1), relayIn: inR, relayOut: outW}
	go func() { p.served <- Serve(context.Background(), inR, outW); outW.Close() }()
	p.c, err = Open(outR, inW)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.c.Close()
		if err := <-p.served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// freePort is a loopback port nobody listens on (as of now).
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// fakeRelay is a scripted relay: the test writes its frames and reads the host's.
type fakeRelay struct {
	t      *testing.T
	w      *io.PipeWriter
	frames chan *frame // the host's, read as they come
	ended  chan error  // why the host's side ended
}

func newFake(t *testing.T, hello string) (*fakeRelay, func() (*Client, error)) {
	hr, rw := io.Pipe() // relay → host
	rr, hw := io.Pipe() // host → relay
	f := &fakeRelay{t: t, w: rw, frames: make(chan *frame, 1000), ended: make(chan error, 1)}
	go func() { io.WriteString(rw, hello+"\n") }()
	go func() {
		br := newReader(rr)
		for {
			fr, err := readFrame(br)
			if err != nil {
				f.ended <- err
				close(f.frames)
				return
			}
			f.frames <- fr
		}
	}()
	return f, func() (*Client, error) { return Open(hr, hw) }
}

func (f *fakeRelay) send(line string) {
	if _, err := io.WriteString(f.w, line+"\n"); err != nil {
		f.t.Fatal(err)
	}
}

// next is the host's next frame.
func (f *fakeRelay) next() *frame {
	fr, ok := <-f.frames
	if !ok {
		f.t.Fatalf("the host's side ended: %v", <-f.ended)
	}
	return fr
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s %q does not contain %q", what, s, sub)
		}
	}
}

// killed says whether e is a process's end by a kill: on Unix by SIGKILL;
// on Windows (TerminateProcess, no signals) any non-zero code.
func killed(e Exit) bool {
	if runtime.GOOS == "windows" {
		return e.Code != 0
	}
	return e.Code == -1 && e.Signal == "SIGKILL"
}
