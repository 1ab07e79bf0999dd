package egress

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The credential scanner: a small set of byte patterns (a credential's
// placeholder or value in each encoding that matters) searched in
// header values, URLs and streamed bodies. A stream is scanned in the
// chunks it arrives in, and a chunk's tail that could be the start of a
// pattern is held back until the next chunk says whether it is (so a
// pattern split across TCP segments, HTTP/2 DATA frames or flushes is
// found); a tail that cannot start one (an SSE event's "\n\n") is
// passed on at once, so streams are not delayed.

// form is one encoding of a secret or placeholder.
type form struct {
	b    []byte
	cred int    // index of the credential in its credSet
	how  string // "" (as it is), "base64", "percent-encoded", "json-escaped"
}

// patterns is a set of forms to search for.
type patterns struct {
	forms  []form
	maxLen int
	// lower are the forms in lower case (header names are compared
	// without case).
	lower [][]byte
	// inForm marks every byte that occurs in a form: a chunk that ends
	// in another byte holds nothing back.
	inForm [256]bool
	starts [256]bool // the forms' first bytes
	// skip is the one-pass search of a stream's chunks, built at the
	// first long chunk (a set's forms are all added before it is used).
	skip atomic.Pointer[skipIndex]
}

func (ps *patterns) add(f form) {
	if len(f.b) == 0 {
		return
	}
	for _, g := range ps.forms {
		if bytes.Equal(g.b, f.b) {
			return
		}
	}
	ps.forms = append(ps.forms, f)
	ps.lower = append(ps.lower, bytes.ToLower(f.b))
	ps.maxLen = max(ps.maxLen, len(f.b))
	for _, c := range f.b {
		ps.inForm[c] = true
	}
	ps.starts[f.b[0]] = true
}

// mask overwrites every occurrence of every form in b with '*' (same
// length: framing and Content-Length stay right) and calls hit with
// the index of each form found, in the forms' order. The occurrences
// are all found in b as it came, then masked: one form's masking never
// hides another's overlapping occurrence.
func (ps *patterns) mask(b []byte, hit func(int)) {
	type span struct{ i, j int }
	var spans []span
	ps.find(b, func(i, j int) { spans = append(spans, span{i, j}) })
	if len(spans) == 0 {
		return
	}
	found := make([]bool, len(ps.forms))
	for _, s := range spans {
		found[s.i] = true
		for k := s.j; k < s.j+len(ps.forms[s.i].b); k++ {
			b[k] = '*'
		}
	}
	for i, ok := range found {
		if ok && hit != nil {
			hit(i)
		}
	}
}

// find calls at(i, j) for each occurrence of form i at b[j:] (all of
// them, overlapping ones too). A short b is searched form by form; a
// long one in one pass (skipIndex), which costs a response's bytes a
// fraction of what one bytes.Index per form does.
func (ps *patterns) find(b []byte, at func(i, j int)) {
	if len(b) >= skipMinText && ps.minLen() >= skipGram {
		ps.index().find(ps, b, at)
		return
	}
	for i := range ps.forms {
		f := ps.forms[i].b
		for off := 0; ; {
			j := bytes.Index(b[off:], f)
			if j < 0 {
				break
			}
			at(i, off+j)
			off += j + 1
		}
	}
}

func (ps *patterns) minLen() int {
	m := ps.maxLen
	for i := range ps.forms {
		m = min(m, len(ps.forms[i].b))
	}
	return m
}

// index is ps's skipIndex, built once all its forms are in.
func (ps *patterns) index() *skipIndex {
	if x := ps.skip.Load(); x != nil && x.n == len(ps.forms) {
		return x
	}
	x := newSkipIndex(ps)
	ps.skip.Store(x)
	return x
}

const (
	skipGram    = 4   // bytes hashed at a window's end
	skipBits    = 12  // the shift table has 1<<skipBits entries
	skipWindow  = 128 // at most this much of each form's start is windowed
	skipMinText = 256 // shorter texts are searched form by form
)

// skipIndex is a Wu-Manber search for all of a set's forms at once. A
// window of m bytes (the shortest form's length, at most skipWindow)
// slides over the text; shift, keyed by a hash of the skipGram bytes at
// the window's end, is how far it may move without passing over where
// any form's first m bytes would end (0: they may end here, so the forms
// are compared at the window's start). In text that holds no form most
// windows move m-skipGram+1 bytes after one load and one lookup.
type skipIndex struct {
	n, m  int // forms indexed; window length
	shift [1 << skipBits]uint8
}

func gramHash(x uint32) uint32 { return (x * 0x9e3779b1) >> (32 - skipBits) }

func newSkipIndex(ps *patterns) *skipIndex {
	x := &skipIndex{n: len(ps.forms), m: min(ps.minLen(), skipWindow)}
	for i := range x.shift {
		x.shift[i] = uint8(x.m - skipGram + 1)
	}
	for i := range ps.forms {
		w := ps.forms[i].b[:x.m]
		for end := skipGram - 1; end < x.m; end++ { // end: the gram's last byte in w
			h := gramHash(binary.LittleEndian.Uint32(w[end-skipGram+1:]))
			x.shift[h] = min(x.shift[h], uint8(x.m-1-end))
		}
	}
	return x
}

func (x *skipIndex) find(ps *patterns, b []byte, at func(i, j int)) {
	for end := x.m - 1; end < len(b); {
		if s := x.shift[gramHash(binary.LittleEndian.Uint32(b[end-skipGram+1:]))]; s > 0 {
			end += int(s)
			continue
		}
		j := end - x.m + 1
		for i := range ps.forms {
			if f := ps.forms[i].b; bytes.HasPrefix(b[j:], f) {
				at(i, j)
			}
		}
		end++
	}
}

// holdBack is how many bytes at the end of b could begin a form (the
// longest suffix of b that is a proper prefix of one): the suffixes are
// tried longest first, only those that begin with a form's first byte.
func (ps *patterns) holdBack(b []byte) int {
	if len(b) == 0 || !ps.inForm[b[len(b)-1]] {
		return 0
	}
	for j := max(0, len(b)-(ps.maxLen-1)); j < len(b); j++ {
		if !ps.starts[b[j]] {
			continue
		}
		tail := b[j:]
		for i := range ps.forms {
			if f := ps.forms[i].b; len(f) > len(tail) && f[0] == tail[0] && bytes.HasPrefix(f, tail) {
				return len(tail)
			}
		}
	}
	return 0
}

// scanReader passes a stream through, finding the forms of ps across
// chunk boundaries: with masking set it overwrites them ('*'), else it
// only reports them. hit is called once per form found; onEOF, when
// set, runs before io.EOF is returned (the trailers are read then).
type scanReader struct {
	src     io.ReadCloser
	ps      *patterns
	masking bool
	hit     func(*form)
	onEOF   func()

	buf    []byte  // read, not yet passed on: buf[:ready] is scanned and free to go
	pooled *[]byte // buf's first array, from scanBufs
	off    int     // start of what is not yet passed on
	hold   int     // how much of buf waits for the next chunk (nothing once the source ended)
	seen   []bool  // per form: reported
	err    error

	// A held tail waits at most holdIdle for the next chunk (an
	// interactive stream, a WebSocket's echo, must not stall): the read
	// goes on in the background (into tmp), and the tail is passed on,
	// masked if it is a form's first minHeldMask bytes or more.
	pending chan asyncRead
	tmp     []byte
	// carry is the last bytes passed on (as they came, at most maxLen-1),
	// so that a form they begin is found, and its rest masked, in what
	// comes next.
	carry, junction []byte
}

// lastBytes is the last n bytes of prev followed by b, in prev's array
// when it can be (prev is reused).
func lastBytes(prev, b []byte, n int) []byte {
	if len(b) >= n {
		return append(prev[:0], b[len(b)-n:]...)
	}
	if keep := n - len(b); len(prev) > keep {
		prev = append(prev[:0], prev[len(prev)-keep:]...)
	}
	return append(prev, b...)
}

// asyncRead is a background read's result.
type asyncRead struct {
	n   int
	err error
}

const (
	holdIdle    = 10 * time.Millisecond
	minHeldMask = 8
)

// scanBufs are scanReaders' buffers: a stream takes one at its first
// read and gives it back once it has passed everything on, so that a
// small response does not cost a 32 KiB allocation (most of what the
// guard added to a small request).
var scanBufs = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

func newScanReader(src io.ReadCloser, ps *patterns, masking bool, hit func(*form)) *scanReader {
	return &scanReader{src: src, ps: ps, masking: masking, hit: hit, seen: make([]bool, len(ps.forms))}
}

func (r *scanReader) Read(p []byte) (int, error) {
	for {
		if ready := len(r.buf) - r.hold; r.off < ready {
			n := copy(p, r.buf[r.off:ready])
			r.off += n
			return n, nil
		}
		if r.err != nil {
			if r.off < len(r.buf) { // the held tail, at the end
				n := copy(p, r.buf[r.off:])
				r.off += n
				return n, nil
			}
			if r.pooled != nil {
				scanBufs.Put(r.pooled)
				r.pooled, r.buf, r.off = nil, nil, 0
			}
			if r.err == io.EOF && r.onEOF != nil {
				r.onEOF()
				r.onEOF = nil
			}
			return 0, r.err
		}
		if r.pooled == nil && r.buf == nil {
			r.pooled = scanBufs.Get().(*[]byte)
			r.buf = (*r.pooled)[:0]
		}
		// Keep the unsent tail, read more after it, scan it all again.
		r.buf = append(r.buf[:0], r.buf[r.off:]...)
		r.off = 0
		if cap(r.buf)-len(r.buf) < 4<<10 {
			r.buf = append(r.buf, make([]byte, 32<<10)...)[:len(r.buf)]
		}
		n, err, idle := r.read()
		if idle {
			r.release()
			continue
		}
		r.err = err
		r.scan()
		if r.hold = 0; err == nil && r.masking {
			// Only a masking stream holds: one that only reports finds
			// what spans chunks through carry, and delays nothing.
			r.hold = r.ps.holdBack(r.buf)
		}
		r.carry = lastBytes(r.carry, r.buf[:len(r.buf)-r.hold], r.ps.maxLen-1)
		if n == 0 && err == nil {
			return 0, nil
		}
	}
}

// read appends the source's next chunk to buf. With a tail held, it
// reads in the background and gives up after holdIdle (idle: nothing
// was read yet, the read goes on).
func (r *scanReader) read() (n int, err error, idle bool) {
	if r.pending == nil && r.hold == 0 {
		n, err = r.src.Read(r.buf[len(r.buf):cap(r.buf)])
		r.buf = r.buf[:len(r.buf)+n]
		return n, err, false
	}
	if r.pending == nil {
		if r.tmp == nil {
			r.tmp = make([]byte, 32<<10)
		}
		r.pending = make(chan asyncRead, 1)
		go func(ch chan<- asyncRead, b []byte) {
			n, err := r.src.Read(b)
			ch <- asyncRead{n, err}
		}(r.pending, r.tmp)
	}
	var wait <-chan time.Time
	if r.hold > 0 {
		t := time.NewTimer(holdIdle)
		defer t.Stop()
		wait = t.C
	}
	select {
	case a := <-r.pending:
		r.pending = nil
		r.buf = append(r.buf, r.tmp[:a.n]...)
		return a.n, a.err, false
	case <-wait:
		return 0, nil, true
	}
}

// release passes the held tail on (the source is idle), masked when it
// is long enough to be a form's start on purpose.
func (r *scanReader) release() {
	tail := r.buf[r.off:]
	r.carry = lastBytes(r.carry, tail, r.ps.maxLen-1) // as it came: what follows is matched against it
	if r.masking && len(tail) >= minHeldMask {
		for i := range r.ps.forms {
			if bytes.HasPrefix(r.ps.forms[i].b, tail) {
				for k := range tail {
					tail[k] = '*'
				}
				r.report(i)
				break
			}
		}
	}
	r.hold = 0
}

func (r *scanReader) report(i int) {
	if !r.seen[i] {
		r.seen[i] = true
		r.hit(&r.ps.forms[i])
	}
}

func (r *scanReader) scan() {
	if k := len(r.carry); k > 0 {
		// A form that began in what was passed on: its rest is here.
		r.junction = append(append(r.junction[:0], r.carry...), r.buf[:min(len(r.buf), r.ps.maxLen-1)]...)
		r.ps.find(r.junction, func(i, j int) {
			if j >= k {
				return // wholly here: found below
			}
			if r.masking {
				for x := k; x < min(j+len(r.ps.forms[i].b), len(r.junction)); x++ {
					r.buf[x-k] = '*'
				}
			}
			r.report(i)
		})
	}
	if r.masking {
		r.ps.mask(r.buf, r.report)
		return
	}
	r.ps.find(r.buf, func(i, _ int) { r.report(i) })
}

func (r *scanReader) Close() error { return r.src.Close() }

// base64Cores are the characters of s's base64 encodings (standard and
// URL alphabets) that do not depend on the bytes around it, for each of
// the three offsets s can have in the encoded data: a secret embedded
// anywhere in a base64 blob contains one of them.
func base64Cores(s string) []string {
	var out []string
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for pad := 0; pad < 3; pad++ {
			e := enc.EncodeToString(append(make([]byte, pad), s...))
			skip := []int{0, 2, 3}[pad]    // characters that carry pad bits
			full := (pad + len(s)) * 8 / 6 // characters with no bits of what follows
			if full-skip >= 8 {
				out = append(out, e[skip:full])
			}
		}
	}
	return out
}

// maxEscapeSubsets bounds the bytes whose escaped-or-not combinations
// are all listed (2^n forms per escape and hex case).
const maxEscapeSubsets = 4

// escapings are s with some of its escapable bytes written as esc does
// (each byte alone: "\u002B", "%2B"), because encoders differ in which
// of them they escape (.NET's JSON writes "+" as \u002B
// and leaves "/", Python's quote leaves "/", JS's encodeURIComponent
// leaves "!'()*"): every subset of the distinct such bytes when there are
// at most maxEscapeSubsets of them (else none, all, and each alone or
// all but it), and every byte escaped (an encoder told to, or someone
// hiding it); each with upper- and lower-case hex.
func escapings(s string, escapable func(byte) bool, esc func(c byte, hex string) string) []string {
	var special []byte
	for i := 0; i < len(s); i++ {
		if c := s[i]; escapable(c) && bytes.IndexByte(special, c) < 0 {
			special = append(special, c)
		}
	}
	var sets []func(byte) bool
	if len(special) <= maxEscapeSubsets {
		for m := 0; m < 1<<len(special); m++ {
			sets = append(sets, func(c byte) bool { i := bytes.IndexByte(special, c); return i >= 0 && m&(1<<i) != 0 })
		}
	} else {
		sets = append(sets, func(byte) bool { return false }, escapable)
		for _, x := range special {
			sets = append(sets, func(c byte) bool { return c == x }, func(c byte) bool { return escapable(c) && c != x })
		}
	}
	sets = append(sets, func(byte) bool { return true })
	var out []string
	for _, in := range sets {
		for _, hex := range []string{"%02X", "%02x"} {
			out = append(out, escapeBytes(s, in, esc, hex))
		}
	}
	return out
}

// escapeBytes is s with the bytes in writes as esc does.
func escapeBytes(s string, in func(byte) bool, esc func(c byte, hex string) string, hex string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if in(s[i]) {
			b.WriteString(esc(s[i], hex))
		} else {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// percentForms are s percent-encoded (RFC 3986 2.1) as escapings lists
// it, as Go's url.QueryEscape writes it ("+" for a space), and twice (a
// URL carried in a URL's query, as a login redirect's next=).
func percentForms(s string) []string {
	pct := func(c byte, hex string) string { return "%" + fmt.Sprintf(hex, c) }
	reserved := func(c byte) bool { return !isAlnum(c) && strings.IndexByte("-._~", c) < 0 }
	out := append(escapings(s, reserved, pct), url.QueryEscape(s))
	for _, once := range []string{url.QueryEscape(s), escapeBytes(s, reserved, pct, "%02X"), escapeBytes(s, reserved, pct, "%02x")} {
		out = append(out, strings.ReplaceAll(once, "%", "%25"))
	}
	return out
}

// jsonForms are s as a JSON string's contents (RFC 8259 7): with only
// '"', '\\' and control characters escaped (JSON.stringify), "/" as "\/"
// too (PHP), and the bytes some encoders escape as \u00XX as escapings
// lists it.
func jsonForms(s string) []string {
	var min strings.Builder
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			min.WriteByte('\\')
			min.WriteRune(c)
		case c < 0x20:
			fmt.Fprintf(&min, "\\u%04x", c)
		default:
			min.WriteRune(c)
		}
	}
	out := []string{min.String(), strings.ReplaceAll(min.String(), "/", `\/`)}
	// What JSON encoders escape beyond that (in the string with '"' and
	// '\\' escaped already): encoding/json <, > and &, .NET's default
	// encoder also ', + and `, PHP /.
	escapable := func(c byte) bool { return c >= 0x80 || strings.IndexByte("<>&'+`/", c) >= 0 }
	u := func(c byte, hex string) string { return "\\u00" + fmt.Sprintf(hex, c) }
	all := func(byte) bool { return true }
	return append(append(out, escapings(min.String(), escapable, u)...), escapeBytes(s, all, u, "%02X"), escapeBytes(s, all, u, "%02x"))
}

// jsonUnescape undoes the JSON escapes in s (\uXXXX, \", \\, \/, \b,
// \f, \n, \r, \t) wherever they are, leaving anything else as it is: a
// header may hold JSON around the escaped text, or be no JSON at all.
func jsonUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch c := s[i+1]; c {
		case '"', '\\', '/':
			b.WriteByte(c)
			i++
		case 'b', 'f', 'n', 'r', 't':
			b.WriteByte(map[byte]byte{'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[c])
			i++
		case 'u':
			if n, err := strconv.ParseUint(s[min(i+2, len(s)):min(i+6, len(s))], 16, 16); err == nil && i+6 <= len(s) {
				b.WriteRune(rune(n))
				i += 5
				continue
			}
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
