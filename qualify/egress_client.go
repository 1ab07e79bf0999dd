//go:build linux

package qualify

// The in-sandbox half of the inspected-egress checks (P29, P32, `corral
// doctor --egress`): `corral __egress-client MODE SPEC-JSON`, the binary
// under test run inside the sandbox (as its probes are), printing one
// JSON line. It is a real Go client: net/http's Transport through the
// sandbox's proxy variables (HTTPS_PROXY), HTTP/1.1 or HTTP/2, TLS
// verified against Go's system pool, which is what the sandbox's trust
// gives Go programs (SSL_CERT_FILE, SSL_CERT_DIR, the distro bundle).
//
//	fetch  a list of requests (FetchSpec) -> FetchReport; with Vars, the
//	       requests carry credential placeholders read from the
//	       environment (Expand), and with Hunt the client then searches
//	       what it can read for a secret it knows only by hash
//	ca     find the CA that issued an inspected host's leaf in the
//	       sandbox's trust, then hunt for its private key in everything
//	       the sandbox can read (CASpec) -> CAReport

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/websocket"

	"github.com/corral-sandbox/corral/internal/pemcert"
	"github.com/corral-sandbox/corral/provider"
)

// ClientArg is the corral binary's hidden argument that runs ClientMain
// (cmd/corral dispatches it, as it does probe.Arg).
const ClientArg = "__egress-client"

// ClientMain runs the in-sandbox client: args are MODE SPEC-JSON. It
// prints one JSON line (FetchReport or CAReport) and returns 0, or 2 with
// a message on stderr for a bad invocation.
func ClientMain(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: corral "+ClientArg+" fetch|ca SPEC-JSON")
		return 2
	}
	var out any
	var err error
	switch args[0] {
	case "fetch":
		var s FetchSpec
		if err = json.Unmarshal([]byte(args[1]), &s); err == nil {
			out = Fetch(s)
		}
	case "ca":
		var s CASpec
		if err = json.Unmarshal([]byte(args[1]), &s); err == nil {
			out = HuntCA(s)
		}
	default:
		err = fmt.Errorf("unknown mode %q (want fetch or ca)", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral "+ClientArg+": "+err.Error())
		return 2
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return 0
}

// FetchSpec is what `fetch` does: Requests in order.
type FetchSpec struct {
	// Record, when set, completes every TLS handshake and records whether
	// the leaf verifies (FetchResult.Verified) instead of refusing it, so
	// that a request still goes out when the sandbox does not trust the
	// certificate (a check can then see where it went). Otherwise a leaf
	// that does not verify ends the request with the error.
	Record   bool           `json:"record,omitempty"`
	Requests []FetchRequest `json:"requests"`
	// Vars are environment variables of the sandbox (credential
	// placeholders: not secrets) that the requests use as "{{NAME}}"
	// (Expand); the report carries their values.
	Vars []string `json:"vars,omitempty"`
	// Files are files inside whose content the report carries (a
	// placeholder's exposed file).
	Files []string `json:"files,omitempty"`
	// Hunt, when set, is searched for after the requests (HuntNeedle).
	Hunt *Needle `json:"hunt,omitempty"`
}

// FetchRequest is one request through the proxy.
type FetchRequest struct {
	Label string `json:"label"`
	// Kind is "" (a request; the first 512 bytes of the body are kept),
	// "sse" (a GET whose first event is read within 10 s, the stream then
	// closed), "ws" (a WebSocket handshake on its own CONNECT tunnel,
	// then one text message that must come back), "h1raw" (HTTP/1.1
	// written by hand on its own tunnel, in writes of Chunk bytes, each
	// its own TLS record) or "h2raw" (HTTP/2 frame by frame on its own
	// tunnel: the header block in a HEADERS and CONTINUATION frames of
	// Chunk bytes, the body in DATA frames of Chunk bytes).
	Kind   string `json:"kind,omitempty"`
	Method string `json:"method,omitempty"` // default GET
	URL    string `json:"url"`              // https://host:port/path (http:// for a plain request)
	// Host, when set, is the Host header (HTTP/1.1) or :authority
	// (HTTP/2) instead of the URL's; the tunnel and SNI still name the
	// URL's host.
	Host string `json:"host,omitempty"`
	// SNI, when set, is the TLS server name instead of the URL's host.
	SNI   string `json:"sni,omitempty"`
	Proto string `json:"proto,omitempty"` // "h1" (default) or "h2": only that is offered
	Body  string `json:"body,omitempty"`
	// Headers are more request headers, "Name: value", in order.
	Headers []string `json:"headers,omitempty"`
	Chunk   int      `json:"chunk,omitempty"` // h1raw, h2raw: bytes per write or frame; 0: all at once
	// Full keeps the whole response: every header and trailer (Head) and
	// up to fullMax bytes of body, decoded too when it is compressed
	// (Decoded).
	Full bool `json:"full,omitempty"`
	// Conn names a connection group: requests with the same Conn, Proto
	// and SNI share a Transport, so HTTP/2 ones share one connection.
	Conn string `json:"conn,omitempty"`
}

// FetchReport is `fetch`'s output.
type FetchReport struct {
	Results []FetchResult     `json:"results"`
	Vars    map[string]string `json:"vars,omitempty"`  // FetchSpec.Vars' values
	Files   map[string]string `json:"files,omitempty"` // FetchSpec.Files' content, or "<error>"
	Hunt    *KeyHunt          `json:"hunt,omitempty"`  // FetchSpec.Hunt's search
}

// FetchResult is what one request got.
type FetchResult struct {
	Label  string `json:"label"`
	Status int    `json:"status,omitempty"` // 0: no response
	Proto  string `json:"proto,omitempty"`  // the response's, "HTTP/2.0"
	Body   string `json:"body,omitempty"`
	Err    string `json:"err,omitempty"`
	// Issuer is the subject of the leaf's issuer, Leaf the leaf (PEM).
	Issuer string `json:"issuer,omitempty"`
	Leaf   string `json:"leaf,omitempty"`
	// Verified is whether the leaf verifies for the URL's host (or SNI)
	// against Go's system pool inside the sandbox; VerifyErr why not.
	Verified  bool   `json:"verified"`
	VerifyErr string `json:"verify_err,omitempty"`
	Event     string `json:"event,omitempty"` // sse: the first event's data
	Echo      string `json:"echo,omitempty"`  // ws: the message that came back
	// Head is, with Full, the status line and each header and trailer as
	// "Name: value" lines; Decoded the body decoded per its
	// Content-Encoding (gzip, deflate), when it has one.
	Head    string `json:"head,omitempty"`
	Decoded string `json:"decoded,omitempty"`
}

// Fetch runs s's requests in order.
func Fetch(s FetchSpec) FetchReport {
	roots, rootsErr := x509.SystemCertPool()
	proxy := sandboxProxy()
	transports := map[string]*http.Transport{}
	var rep FetchReport
	if len(s.Vars) > 0 {
		rep.Vars = map[string]string{}
		for _, v := range s.Vars {
			rep.Vars[v] = os.Getenv(v)
		}
	}
	for _, f := range s.Files {
		if rep.Files == nil {
			rep.Files = map[string]string{}
		}
		b, err := os.ReadFile(f)
		if err != nil {
			rep.Files[f] = "<" + err.Error() + ">"
		} else {
			rep.Files[f] = string(b)
		}
	}
	for _, q := range s.Requests {
		q = q.expand(rep.Vars)
		r := FetchResult{Label: q.Label}
		u, err := url.Parse(q.URL)
		// http:// only as a plain request through the proxy (absolute
		// form): a check that nothing is substituted there.
		if err != nil || u.Scheme != "https" && (u.Scheme != "http" || q.Kind != "") {
			r.Err = fmt.Sprintf("bad url %q", q.URL)
			rep.Results = append(rep.Results, r)
			continue
		}
		sni := q.SNI
		if sni == "" {
			sni = u.Hostname()
		}
		verify := func(cs *tls.ConnectionState) {
			if cs == nil || len(cs.PeerCertificates) == 0 {
				return
			}
			leaf := cs.PeerCertificates[0]
			r.Issuer = leaf.Issuer.String()
			r.Leaf = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}))
			if rootsErr != nil {
				r.VerifyErr = "no system pool: " + rootsErr.Error()
				return
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: sni}); err != nil {
				r.VerifyErr = err.Error()
			} else {
				r.Verified = true
			}
		}
		tcfg := &tls.Config{ServerName: sni, InsecureSkipVerify: s.Record, MinVersion: tls.VersionTLS12}
		switch q.Kind {
		case "ws":
			fetchWS(q, u, proxy, tcfg, &r, verify)
		case "h1raw":
			fetchH1Raw(q, u, proxy, tcfg, &r, verify)
		case "h2raw":
			fetchH2Raw(q, u, proxy, tcfg, &r, verify)
		default:
			key := q.Conn + "|" + q.Proto + "|" + sni
			tr := transports[key]
			if tr == nil {
				tr = &http.Transport{Proxy: proxy, TLSClientConfig: tcfg, DisableCompression: true}
				tr.Protocols = new(http.Protocols)
				if q.Proto == "h2" {
					tr.Protocols.SetHTTP2(true)
				} else {
					tr.Protocols.SetHTTP1(true)
				}
				transports[key] = tr
			}
			fetchHTTP(q, u, tr, &r, verify)
		}
		rep.Results = append(rep.Results, r)
	}
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
	if s.Hunt != nil {
		h := HuntNeedle(*s.Hunt)
		rep.Hunt = &h
	}
	return rep
}

func fetchHTTP(q FetchRequest, u *url.URL, tr *http.Transport, r *FetchResult, verify func(*tls.ConnectionState)) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m := q.Method
	if m == "" {
		m = http.MethodGet
	}
	var body io.Reader
	if q.Body != "" {
		body = strings.NewReader(q.Body)
	}
	req, err := http.NewRequestWithContext(ctx, m, u.String(), body)
	if err != nil {
		r.Err = err.Error()
		return
	}
	if q.Host != "" {
		req.Host = q.Host
	}
	for _, h := range q.Headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		r.Err = err.Error()
		return
	}
	defer resp.Body.Close()
	r.Status, r.Proto = resp.StatusCode, resp.Proto
	verify(resp.TLS)
	if q.Kind == "sse" {
		r.Event, r.Err = firstEvent(resp.Body, 10*time.Second)
		return
	}
	if !q.Full {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.Body = string(b)
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, fullMax))
	if err != nil {
		r.Err = "body: " + err.Error()
	}
	r.fill(resp.Proto+" "+resp.Status, resp.Header, resp.Trailer, b)
}

// firstEvent reads an event stream until its first "data:" line, for at
// most d.
func firstEvent(body io.ReadCloser, d time.Duration) (string, string) {
	got := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				got <- strings.TrimSpace(v)
				return
			}
		}
		close(got)
	}()
	select {
	case ev, ok := <-got:
		if !ok {
			return "", "the stream ended without an event"
		}
		return ev, ""
	case <-time.After(d):
		body.Close()
		return "", fmt.Sprintf("no event within %s (the stream is buffered?)", d)
	}
}

// sandboxProxy is the proxy the sandbox's HTTPS_PROXY names, for every
// URL: net/http's ProxyFromEnvironment would dial loopback addresses
// directly, and the cases ask the proxy for them too.
func sandboxProxy() func(*http.Request) (*url.URL, error) {
	v := os.Getenv("HTTPS_PROXY")
	if v == "" {
		v = os.Getenv("https_proxy")
	}
	pu, err := url.Parse(v)
	if v == "" || err != nil || pu.Host == "" {
		return func(*http.Request) (*url.URL, error) {
			return nil, fmt.Errorf("HTTPS_PROXY %q names no proxy (not a network: proxy sandbox?)", v)
		}
	}
	return http.ProxyURL(pu)
}

// fetchWS opens a CONNECT tunnel through proxy, TLS (http/1.1) over it,
// a WebSocket on u, and echoes one message.
func fetchWS(q FetchRequest, u *url.URL, proxy func(*http.Request) (*url.URL, error), tcfg *tls.Config, r *FetchResult, verify func(*tls.ConnectionState)) {
	tc, err := tunnel(u, proxy, tcfg, "http/1.1", r, verify)
	if err != nil {
		r.Err = err.Error()
		return
	}
	defer tc.Close()
	wu := *u
	wu.Scheme = "wss"
	wc, err := websocket.NewConfig(wu.String(), "https://"+u.Host)
	if err != nil {
		r.Err = err.Error()
		return
	}
	for _, h := range q.Headers {
		k, v, _ := strings.Cut(h, ":")
		wc.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	ws, err := websocket.NewClient(wc, tc)
	if err != nil {
		r.Err = "WebSocket handshake: " + err.Error()
		return
	}
	defer ws.Close()
	r.Status, r.Proto = http.StatusSwitchingProtocols, "HTTP/1.1"
	msg := "echo-" + newToken()
	if err := websocket.Message.Send(ws, msg); err != nil {
		r.Err = "send: " + err.Error()
		return
	}
	var back string
	if err := websocket.Message.Receive(ws, &back); err != nil {
		r.Err = "receive: " + err.Error()
		return
	}
	r.Echo = back
	if back != msg {
		r.Err = fmt.Sprintf("echo %q, sent %q", back, msg)
	}
}

// bufConn reads what a bufio.Reader already holds first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CASpec is what `ca` does.
type CASpec struct {
	// URL is an inspected https URL: the leaf the proxy presents for it
	// names the CA to look for.
	URL string `json:"url"`
	// Roots are more directories to search for the key, besides every
	// top-level directory but the system ones (HuntCA).
	Roots []string `json:"roots,omitempty"`
}

// CAReport is `ca`'s output.
type CAReport struct {
	Fetch FetchResult `json:"fetch"` // the request to URL (verified or not)
	// CA is the certificate (PEM) in the sandbox's trust that issued the
	// leaf: its subject is the leaf's issuer and its key signed it. ""
	// when no trust source holds it.
	CA      string        `json:"ca,omitempty"`
	Sources []TrustSource `json:"sources"`
	Hunt    KeyHunt       `json:"hunt"`
}

// TrustSource is one place the sandbox's clients take roots from.
type TrustSource struct {
	Path  string   `json:"path"`
	Via   []string `json:"via"` // the variables naming it, or "bundle path"
	Err   string   `json:"err,omitempty"`
	Certs int      `json:"certs"`
	// HasCA is whether it holds the issuing CA; Corral lists the subjects
	// of the "Corral sandbox" CAs in it.
	HasCA  bool     `json:"has_ca"`
	Corral []string `json:"corral,omitempty"`
	SHA256 string   `json:"sha256,omitempty"`
}

// KeyHunt is what the search for private keys read and found.
type KeyHunt struct {
	Files int `json:"files"` // regular files read (the first huntFileMax bytes of each)
	// Roots are the trees searched and the files read under each (files
	// seen under an earlier root count there).
	Roots      map[string]int `json:"roots"`
	Bytes      int64          `json:"bytes"` // bytes scanned, memory included
	Unreadable map[string]int `json:"unreadable,omitempty"`
	Truncated  bool           `json:"truncated,omitempty"` // huntTotalMax reached
	// Procs are the processes visible ("pid: cmdline") and MemRead those
	// whose memory could be read.
	Procs   []string `json:"procs"`
	MemRead []string `json:"mem_read,omitempty"`
	// Keys are the private keys found ("where: type"); CAKey those whose
	// public key is the CA's.
	Keys  []string `json:"keys,omitempty"`
	CAKey []string `json:"ca_key,omitempty"`
	// Secret is where a HuntNeedle search found its secret.
	Secret []string `json:"secret,omitempty"`
}

const (
	huntFileMax  = 16 << 20
	huntMemMax   = 256 << 20 // per process
	huntTotalMax = 2 << 30
	huntChunk    = 4 << 20
	huntOverlap  = 16 << 10
)

// HuntCA fetches s.URL, finds the leaf's CA in the sandbox's trust
// sources, and searches for a private key of that CA in: every regular
// file under the top-level directories but /proc, /sys, /dev (but
// /dev/shm), /usr, /bin, /sbin, /lib*, /opt, /boot, /snap, /nix (the
// system's read-only trees) and under s.Roots, HOME and the working
// directory; the environment; each visible process's environ, cmdline,
// open files and readable memory. A key is a PEM block of any private key
// type, or a DER SEC1 or PKCS#8 P-256 key anywhere in the bytes (also in
// base64 in the environment and command lines); it is the CA's when its
// public key is.
func HuntCA(s CASpec) CAReport {
	var rep CAReport
	fr := Fetch(FetchSpec{Record: true, Requests: []FetchRequest{{Label: "inspected host", URL: s.URL}}})
	rep.Fetch = fr.Results[0]
	var leaf *x509.Certificate
	if b, _ := pem.Decode([]byte(rep.Fetch.Leaf)); b != nil {
		leaf, _ = x509.ParseCertificate(b.Bytes)
	}
	var ca *x509.Certificate
	rep.Sources, ca = trustSources(leaf)
	if ca != nil {
		rep.CA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))
	}
	h := &hunter{rep: &rep.Hunt, seen: map[[2]uint64]bool{}}
	if ca != nil {
		h.caPub = ca.PublicKey
	}
	h.run(s.Roots)
	return rep
}

// trustSources reads every trust source of the sandbox and returns the
// one certificate among them that issued leaf (nil when none did).
func trustSources(leaf *x509.Certificate) ([]TrustSource, *x509.Certificate) {
	via := map[string][]string{}
	var order []string
	add := func(path, why string) {
		if path == "" {
			return
		}
		if _, ok := via[path]; !ok {
			order = append(order, path)
		}
		via[path] = append(via[path], why)
	}
	add(provider.TrustBundlePath, "bundle path")
	for _, kv := range provider.TrustEnv("") {
		k := strings.TrimSuffix(kv, "=")
		add(os.Getenv(k), k)
	}
	for _, p := range provider.TrustBundlePaths {
		add(p, "distro path")
	}
	if dir := os.Getenv("SSL_CERT_DIR"); dir != "" {
		for _, d := range filepath.SplitList(dir) {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				add(filepath.Join(d, e.Name()), "SSL_CERT_DIR")
			}
		}
	}
	var out []TrustSource
	var ca *x509.Certificate
	for _, p := range order {
		ts := TrustSource{Path: p, Via: via[p]}
		b, err := os.ReadFile(p)
		if err != nil {
			// A distro path the sandbox's tree lacks is no source.
			if !errors.Is(err, fs.ErrNotExist) || !slices.Equal(ts.Via, []string{"distro path"}) {
				ts.Err = err.Error()
				out = append(out, ts)
			}
			continue
		}
		sum := sha256.Sum256(b)
		ts.SHA256 = hex.EncodeToString(sum[:])
		ders, _ := pemcert.Split(b)
		for _, der := range ders {
			c, err := x509.ParseCertificate(der)
			if err != nil {
				continue
			}
			ts.Certs++
			if slices.Contains(c.Subject.Organization, "Corral sandbox") {
				ts.Corral = append(ts.Corral, c.Subject.CommonName)
			}
			if leaf != nil && bytes.Equal(c.RawSubject, leaf.RawIssuer) && leaf.CheckSignatureFrom(c) == nil {
				ts.HasCA = true
				if ca == nil {
					ca = c
				}
			}
		}
		out = append(out, ts)
	}
	return out, ca
}

// hunter searches for private keys.
type hunter struct {
	rep   *KeyHunt
	caPub crypto.PublicKey
	seen  map[[2]uint64]bool // dev, ino of files read
	found map[string]bool
	// needle, when set, is secrets looked for too (HuntNeedle), whose
	// SHA-256s are needleSums.
	needle     *Needle
	needleSums [][32]byte
}

func (h *hunter) unreadable(err error) {
	if h.rep.Unreadable == nil {
		h.rep.Unreadable = map[string]int{}
	}
	k := "error"
	var en syscall.Errno
	if errors.As(err, &en) {
		k = strconv.Itoa(int(en)) + " " + en.Error()
	}
	h.rep.Unreadable[k]++
}

func (h *hunter) full() bool {
	if h.rep.Bytes >= huntTotalMax {
		h.rep.Truncated = true
		return true
	}
	return false
}

// huntRoots are searched whether or not "/" can be listed (Landlock
// lets a sandbox read granted trees it cannot list the parent of);
// /.corral is the docker provider's (its binary and sockets).
var huntRoots = []string{"/run", "/run/corral", "/run/user", "/var/run", "/.corral", "/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/etc", "/home", "/root",
	"/var", "/mnt", "/srv", "/media", "/usr/local/share/ca-certificates", "/usr/share/ca-certificates"}

func (h *hunter) run(extra []string) {
	skip := map[string]bool{"/proc": true, "/sys": true, "/dev": true, "/usr": true, "/bin": true, "/sbin": true, "/lib": true, "/lib32": true,
		"/lib64": true, "/libx32": true, "/opt": true, "/boot": true, "/snap": true, "/nix": true}
	roots := append([]string(nil), huntRoots...)
	if ents, err := os.ReadDir("/"); err == nil {
		for _, e := range ents {
			if p := "/" + e.Name(); !skip[p] {
				roots = append(roots, p)
			}
		}
	}
	roots = append(roots, extra...)
	if home := os.Getenv("HOME"); home != "" {
		roots = append(roots, home)
	}
	if wd, err := os.Getwd(); err == nil {
		roots = append(roots, wd)
	}
	h.rep.Roots = map[string]int{}
	for _, r := range roots {
		if _, done := h.rep.Roots[r]; done {
			continue
		}
		n := h.rep.Files
		h.walk(r)
		h.rep.Roots[r] = h.rep.Files - n
	}
	// The trust files themselves, wherever they are.
	for _, p := range append([]string{provider.TrustBundlePath}, provider.TrustBundlePaths...) {
		h.file(p, p)
	}
	for _, kv := range os.Environ() {
		h.scanText([]byte(kv), "environment")
	}
	h.procs()
}

// walk reads every regular file under root (symlinks are not followed:
// what they name is reached as itself).
func (h *hunter) walk(root string) {
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			h.unreadable(err)
			return nil
		}
		if h.full() {
			return filepath.SkipAll
		}
		if d.Type().IsRegular() {
			h.file(p, p)
		}
		return nil
	})
}

// file scans the first huntFileMax bytes of the regular file at path
// (once per inode), reporting it as where.
func (h *hunter) file(path, where string) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		h.unreadable(err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k := [2]uint64{uint64(st.Dev), st.Ino}
		if h.seen[k] {
			return
		}
		h.seen[k] = true
	}
	b, err := io.ReadAll(io.LimitReader(f, huntFileMax))
	if err != nil {
		h.unreadable(err)
	}
	h.rep.Files++
	h.scan(b, where)
}

// procs reads each visible process's cmdline, environ, open files and
// memory (but this process's own: it holds what it read).
func (h *hunter) procs() {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name()
		cmd, _ := os.ReadFile(dir + "/cmdline")
		h.rep.Procs = append(h.rep.Procs, fmt.Sprintf("%d: %s", pid, clip(strings.ReplaceAll(string(cmd), "\x00", " "), 160)))
		if pid == self {
			continue
		}
		h.scanText(cmd, dir+"/cmdline")
		if env, err := os.ReadFile(dir + "/environ"); err != nil {
			h.unreadable(err)
		} else {
			for _, kv := range bytes.Split(env, []byte{0}) {
				h.scanText(kv, dir+"/environ")
			}
		}
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			h.unreadable(err)
		}
		for _, fd := range fds {
			h.file(dir+"/fd/"+fd.Name(), dir+"/fd/"+fd.Name())
		}
		h.mem(dir)
	}
}

// mem scans the readable mappings of the process at dir.
func (h *hunter) mem(dir string) {
	maps, err := os.ReadFile(dir + "/maps")
	if err != nil {
		h.unreadable(err)
		return
	}
	f, err := os.Open(dir + "/mem")
	if err != nil {
		h.unreadable(err)
		return
	}
	defer f.Close()
	var total int64
	read := false
	buf := make([]byte, huntChunk+huntOverlap)
	for _, line := range strings.Split(string(maps), "\n") {
		fl := strings.Fields(line)
		if len(fl) < 2 || fl[1][0] != 'r' || strings.Contains(line, "[vvar") || strings.HasSuffix(line, "[vsyscall]") {
			continue
		}
		lo, hi, ok := strings.Cut(fl[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		z, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || z <= a {
			continue
		}
		// In chunks that overlap by more than a key's encoding, so that
		// none is cut in two unseen.
		for at := a; at < z && total < huntMemMax && !h.full(); at += huntChunk {
			n := min(z-at, huntChunk+huntOverlap)
			got, err := f.ReadAt(buf[:n], int64(at))
			if got == 0 && err != nil {
				h.unreadable(err)
				break
			}
			read = true
			total += int64(got)
			h.scan(buf[:got], dir+"/mem")
		}
	}
	if read {
		h.rep.MemRead = append(h.rep.MemRead, dir)
	}
}

// scanText scans b and, when it is (or ends in, after "NAME=") base64,
// what it decodes to.
func (h *hunter) scanText(b []byte, where string) {
	h.scan(b, where)
	if i := bytes.IndexByte(b, '='); i >= 0 && i < 256 {
		b = b[i+1:]
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 64 {
		return
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if d, err := enc.DecodeString(s); err == nil {
			h.scan(d, where+" (base64)")
			return
		}
	}
}

var (
	pemBegin = []byte("-----BEGIN ")
	// DER prefixes of a P-256 key: SEC1 ECPrivateKey (RFC 5915; version
	// 1, a 32-byte octet string), and PKCS#8 (RFC 5208) with the
	// id-ecPublicKey and prime256v1 OIDs.
	sec1P256  = []byte{0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20}
	pkcs8P256 = []byte{0x30, 0x81, 0x87, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}
)

// scan looks for private keys in b.
func (h *hunter) scan(b []byte, where string) {
	h.rep.Bytes += int64(len(b))
	if h.needle != nil {
		h.findNeedle(b, where)
	}
	for off := 0; ; {
		i := bytes.Index(b[off:], pemBegin)
		if i < 0 {
			break
		}
		off += i
		blk, _ := pem.Decode(b[off:])
		off += len(pemBegin)
		if blk == nil || !strings.Contains(blk.Type, "PRIVATE KEY") {
			continue
		}
		h.key(blk.Bytes, where, "PEM "+blk.Type)
	}
	for _, pfx := range [][]byte{sec1P256, pkcs8P256} {
		for off := 0; ; {
			i := bytes.Index(b[off:], pfx)
			if i < 0 {
				break
			}
			off += i
			end := min(len(b), off+2+int(b[off+1])) // 30 77: 2 + 0x77 bytes
			if pfx[1] == 0x81 {
				end = min(len(b), off+3+int(b[off+2])) // 30 81 87: 3 + 0x87
			}
			h.key(b[off:end], where, "DER")
			off++
		}
	}
}

// key records the private key der (SEC1, PKCS#8 or PKCS#1) found at
// where, if it parses.
func (h *hunter) key(der []byte, where, form string) {
	var k any
	var err error
	if k, err = x509.ParsePKCS8PrivateKey(der); err != nil {
		if k, err = x509.ParseECPrivateKey(der); err != nil {
			if k, err = x509.ParsePKCS1PrivateKey(der); err != nil {
				return
			}
		}
	}
	var pub crypto.PublicKey
	kind := fmt.Sprintf("%T", k)
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		pub = &k.PublicKey
	case *rsa.PrivateKey:
		pub = &k.PublicKey
	case ed25519.PrivateKey:
		pub = k.Public()
	}
	id := where + ": " + form + " " + kind
	if h.found == nil {
		h.found = map[string]bool{}
	}
	if h.found[id] {
		return
	}
	h.found[id] = true
	h.rep.Keys = append(h.rep.Keys, id)
	if eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool }); ok && h.caPub != nil && eq.Equal(h.caPub) {
		h.rep.CAKey = append(h.rep.CAKey, id)
	}
}
