package probe

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// MaxDetail bounds every Result.Detail, in bytes.
const MaxDetail = 4096

// usageError marks invalid probe arguments: the probe exits 2 and prints the
// message on stderr instead of a Report.
type usageError string

func (e usageError) Error() string { return string(e) }

func usagef(format string, a ...any) error { return usageError(fmt.Sprintf(format, a...)) }

// probeFunc runs one probe with its arguments and returns its results, or a
// usageError when the arguments are invalid.
type probeFunc func(args []string) ([]Result, error)

// probes maps a probe name to its implementation. OS-specific probes are
// added by init functions in probe_linux.go / probe_other.go.
var probes = map[string]probeFunc{
	"read":    probeRead,
	"write":   probeWrite,
	"list":    probeList,
	"symlink": probeSymlink,
	"rename":  probeRename,
	"mkdir":   probeMkdir,
	"unlink":  probeUnlink,
	"env":     probeEnv,
	"sleep":   probeSleep,
	"connect": probeConnect,
	"dns":     probeDNS,
	"http":    probeHTTP,
	"alloc":   probeAlloc,
	"busy":    probeBusy,
}

// Names lists every probe name Main accepts, sorted.
func Names() []string {
	names := []string{"exit", "kill"}
	for n := range probes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// The probes (NAME ARGS -> Results):
//
//	read PATH...            "read PATH": content (first 4 KiB) or errno
//	write PATH...           "write PATH": append WriteLine (O_APPEND|O_CREAT, 0644)
//	list DIR...             "list DIR": sorted names, space-separated
//	symlink TARGET LINK     "symlink TARGET LINK", then "read LINK"
//	rename OLD NEW          "rename OLD NEW"
//	mkdir DIR...            "mkdir DIR"
//	unlink PATH...          "unlink PATH"
//	env                     "env" per variable (NAME=value), "read /proc/PID/environ"
//	                        and "read /proc/PID/cmdline" per visible pid (NUL -> space),
//	                        last "pids" (space-separated)
//	sleep SECONDS [MARKER [ignore]]
//	                        sleeps; "ignore" ignores SIGHUP/SIGINT/SIGTERM first
//	spawn MARKER N          N descendants running `sleep 300 MARKER`, in turn:
//	                        background, setsid, daemon (double fork), nosignals,
//	                        setpgid: "spawn WAY" (Detail "pid N"), then "spawned pids"
//	daemonize MARKER        (internal: the middle process of spawn's double fork)
//	status                  "self F" and "grandchild F" for F in Seccomp, NoNewPrivs,
//	                        CapEff, CapBnd, Uid, Groups (values from /proc/self/status)
//	status-chain DEPTH LABEL (internal: used by status)
//	connect tcp|udp|unix|abstract ADDR...
//	                        "connect KIND ADDR"; udp: OK when the datagram was sent
//	dns NAME SERVER         "dns udp|tcp SERVER NAME send" and "... reply" (Detail
//	                        "rcode=N answers=N A=..."), then "lookup NAME" (system resolver)
//	consent ask BODY | ask-wait BODY SECS | get PATH
//	                        the consent API as a workload asks it (see probeConsent)
//	http PROXY METHOD TARGET [HEADER:VALUE...] [proto:P] [sni:NAME]
//	                        "http METHOD TARGET": OK on 2xx, Detail "CODE body";
//	                        CONNECT 2xx adds "tls sni NAME" / "tls no-sni" (see probeHTTP)
//	tiocsti TEXT            "tiocsti fd 0": OK only if every byte was pushed
//	ptrace PID...|sibling   "ptrace attach ID", "ptrace seize ID", "process_vm_readv ID"
//	syscalls                one Result per alternate kernel path (see probeSyscalls)
//	procfs                  "pids", readlink /proc/1/{root,cwd}, read /proc/1/{cmdline,
//	                        environ}, /proc/1/root/etc/shadow, /proc/kcore (hex), write
//	                        /proc/sys/kernel/core_pattern and /proc/sysrq-trigger
//	fds                     "fds" (inherited), "own fds" (FD_CLOEXEC), "fd N" -> target
//	alloc MB                "alloc MB MiB": how many MiB were allocated and touched
//	forkbomb N              "forkbomb N": count started, first errno, pids
//	fdflood                 "fdflood": count of /dev/null opened before the errno
//	unixpair [ADDR...]      "socketpair TYPE" made; per ADDR, a socketpair end sent to or
//	                        connected to the named unix socket (see probeUnixpair)
//	busy N SECONDS          "busy N SECONDS": N spinning goroutines; wall and CPU time
//	exit CODE               reports, then exits CODE
//	kill SIGNAL             reports, then kills itself with SIGNAL (default action)
//
// Linux-only probes report "unsupported on GOOS" elsewhere.
//
// Main runs the probe named by args[0] with args[1:] (args is everything
// after "__probe" on the command line). It prints one Report as a JSON line
// on stdout and returns the process exit status: 0, 2 for invalid
// arguments (message on stderr), or the code asked for by `exit CODE`.
//
// The probes attack their surroundings (mount over a directory, write to
// /proc/sys, fork bombs), so Main refuses to run outside a sandbox — in the
// host's initial user namespace — unless AnywhereEnv is set to 1 (tests).
func Main(args []string) int {
	if !inSandbox() && os.Getenv(AnywhereEnv) != "1" {
		fmt.Fprintf(os.Stderr, "corral %s: refusing to run outside a corral sandbox (the probes attack their surroundings); they are run by corral qualify\n", Arg)
		return 2
	}
	return run(args, os.Stdout, os.Stderr)
}

// AnywhereEnv, set to 1, lets probes run outside a sandbox (the package's
// own tests).
const AnywhereEnv = "CORRAL_PROBE_ANYWHERE"

// inSandbox reports whether this process is in a user namespace other than
// the host's initial one, whose uid_map is the full identity mapping
// (user_namespaces(7)), or in a docker provider container: PID 1 of its
// PID namespace is corral's container init and no_new_privs is set.
func inSandbox() bool {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if !(len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295") {
		return true
	}
	cmd, _ := os.ReadFile("/proc/1/cmdline")
	args := strings.Split(string(cmd), "\x00")
	status, _ := os.ReadFile("/proc/self/status")
	return len(args) > 1 && args[1] == dockerInitArg && strings.Contains(string(status), "\nNoNewPrivs:\t1\n")
}

// dockerInitArg is the docker provider's init (provider/docker.InitArg;
// probe imports nothing of the providers).
const dockerInitArg = "__docker-init"

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "usage: corral %s NAME [ARGS...]\nprobes: %s\n", Arg, strings.Join(Names(), " "))
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "exit":
		if len(rest) != 1 {
			fmt.Fprintln(stderr, "usage: exit CODE")
			return 2
		}
		code, err := strconv.Atoi(rest[0])
		if err != nil || code < 0 || code > 255 {
			fmt.Fprintf(stderr, "exit: bad code %q\n", rest[0])
			return 2
		}
		emit(stdout, name, []Result{{What: "exit " + rest[0], OK: true}})
		return code
	case "kill":
		if len(rest) != 1 {
			fmt.Fprintln(stderr, "usage: kill SIGNAL")
			return 2
		}
		return killSelf(rest[0], stdout, stderr)
	}
	f, ok := probes[name]
	if !ok {
		fmt.Fprintf(stderr, "unknown probe %q; probes: %s\n", name, strings.Join(Names(), " "))
		return 2
	}
	results, err := f(rest)
	if err != nil {
		var u usageError
		if errors.As(err, &u) {
			fmt.Fprintf(stderr, "%s: %s\n", name, u)
			return 2
		}
		results = append(results, Result{What: name, Detail: bound(err.Error())})
	}
	emit(stdout, name, results)
	return 0
}

// emit writes the Report as one JSON line.
func emit(w io.Writer, name string, results []Result) {
	if results == nil {
		results = []Result{}
	}
	for i := range results {
		results[i].Detail = bound(strings.ToValidUTF8(results[i].Detail, "\uFFFD"))
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(Report{Probe: name, Results: results})
}

// bound cuts s to at most MaxDetail bytes on a rune boundary.
func bound(s string) string { return boundN(s, MaxDetail) }

func boundN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "...[truncated]"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// errnoOf returns the errno name inside err ("" when there is none). A
// network timeout is reported as ETIMEDOUT.
func errnoOf(err error) string {
	if err == nil {
		return ""
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if e == 0 {
			return ""
		}
		return errnoName(e)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "ETIMEDOUT"
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return "ETIMEDOUT"
	}
	return ""
}

// result makes the Result of an operation that returned err. The error text
// goes to Detail only when it carries no errno.
func result(what string, err error) Result {
	r := Result{What: what, OK: err == nil}
	if err != nil {
		r.Errno = errnoOf(err)
		if r.Errno == "" {
			r.Detail = err.Error()
		}
	}
	return r
}

// errnoResult is result for a raw syscall's errno (0 = success).
func errnoResult(what string, e syscall.Errno) Result {
	if e == 0 {
		return Result{What: what, OK: true}
	}
	return result(what, e)
}

// readBounded reads at most MaxDetail bytes of path.
func readBounded(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxDetail))
	return string(b), err
}

// nulToSpace makes /proc environ and cmdline content printable.
func nulToSpace(s string) string {
	return strings.TrimRight(strings.ReplaceAll(s, "\x00", " "), " ")
}

func needArgs(args []string, min int, usage string) error {
	if len(args) < min {
		return usagef("usage: %s", usage)
	}
	return nil
}

func probeRead(args []string) ([]Result, error) {
	if err := needArgs(args, 1, "read PATH..."); err != nil {
		return nil, err
	}
	var rs []Result
	for _, p := range args {
		s, err := readBounded(p)
		r := result("read "+p, err)
		if err == nil {
			r.Detail = s
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// WriteLine is what `write` appends to each file.
const WriteLine = "corral-probe\n"

func probeWrite(args []string) ([]Result, error) {
	if err := needArgs(args, 1, "write PATH..."); err != nil {
		return nil, err
	}
	var rs []Result
	for _, p := range args {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err == nil {
			_, err = f.WriteString(WriteLine)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		rs = append(rs, result("write "+p, err))
	}
	return rs, nil
}

func probeList(args []string) ([]Result, error) {
	if err := needArgs(args, 1, "list DIR..."); err != nil {
		return nil, err
	}
	var rs []Result
	for _, d := range args {
		f, err := os.Open(d)
		var names []string
		if err == nil {
			names, err = f.Readdirnames(-1)
			f.Close()
		}
		r := result("list "+d, err)
		if err == nil {
			sort.Strings(names)
			r.Detail = strings.Join(names, " ")
		}
		rs = append(rs, r)
	}
	return rs, nil
}

func probeSymlink(args []string) ([]Result, error) {
	if len(args) != 2 {
		return nil, usagef("usage: symlink TARGET LINK")
	}
	target, link := args[0], args[1]
	rs := []Result{result("symlink "+target+" "+link, os.Symlink(target, link))}
	s, err := readBounded(link)
	r := result("read "+link, err)
	if err == nil {
		r.Detail = s
	}
	return append(rs, r), nil
}

func probeRename(args []string) ([]Result, error) {
	if len(args) != 2 {
		return nil, usagef("usage: rename OLD NEW")
	}
	return []Result{result("rename "+args[0]+" "+args[1], os.Rename(args[0], args[1]))}, nil
}

func probeMkdir(args []string) ([]Result, error) {
	if err := needArgs(args, 1, "mkdir DIR..."); err != nil {
		return nil, err
	}
	var rs []Result
	for _, d := range args {
		rs = append(rs, result("mkdir "+d, os.Mkdir(d, 0o755)))
	}
	return rs, nil
}

func probeUnlink(args []string) ([]Result, error) {
	if err := needArgs(args, 1, "unlink PATH..."); err != nil {
		return nil, err
	}
	var rs []Result
	for _, p := range args {
		rs = append(rs, result("unlink "+p, unlink(p)))
	}
	return rs, nil
}
