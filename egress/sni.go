package egress

import (
	"errors"
	"io"
)

const maxClientHello = 16 << 10

var errNotClientHello = errors.New("malformed TLS ClientHello")

// sniffResult describes the first bytes a CONNECT client sent.
type sniffResult struct {
	data   []byte // every byte read, to be forwarded upstream first
	isTLS  bool
	sni    string // server_name (raw) when isTLS
	hasSNI bool
}

// sniff reads the client's first bytes. When they start a TLS handshake
// record it reads (reassembling records, at most 16 KiB of handshake) until
// the ClientHello is complete and extracts the server_name.
func sniff(r io.Reader) (sniffResult, error) {
	var res sniffResult
	buf := make([]byte, 0, 1024)
	fill := func(n int) error { // ensure len(buf) >= n
		for len(buf) < n {
			if n > maxClientHello+5*8 {
				return errors.New("TLS ClientHello larger than 16 KiB")
			}
			if cap(buf) < n {
				nb := make([]byte, len(buf), max(n, 2*cap(buf)))
				copy(nb, buf)
				buf = nb
			}
			m, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+m]
			if err != nil && len(buf) < n {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		return nil
	}
	if err := fill(1); err != nil {
		return res, err
	}
	if buf[0] != 0x16 { // not a TLS handshake record
		res.data = buf
		return res, nil
	}
	res.isTLS = true
	var hs []byte // reassembled handshake bytes
	off := 0
	for {
		if err := fill(off + 5); err != nil {
			res.data = buf
			return res, err
		}
		hdr := buf[off : off+5]
		if hdr[0] != 0x16 || hdr[1] != 3 {
			res.data = buf
			return res, errNotClientHello
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if n == 0 || n > maxClientHello {
			res.data = buf
			return res, errNotClientHello
		}
		if err := fill(off + 5 + n); err != nil {
			res.data = buf
			return res, err
		}
		hs = append(hs, buf[off+5:off+5+n]...)
		off += 5 + n
		if len(hs) >= 4 {
			if hs[0] != 1 {
				res.data = buf
				return res, errNotClientHello
			}
			want := 4 + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]))
			if want > maxClientHello {
				res.data = buf
				return res, errors.New("TLS ClientHello larger than 16 KiB")
			}
			if len(hs) >= want {
				res.data = buf
				sni, has, err := parseClientHello(hs[4:want])
				res.sni, res.hasSNI = sni, has
				return res, err
			}
		}
	}
}

// parseClientHello walks a ClientHello body to the server_name extension.
func parseClientHello(b []byte) (sni string, has bool, err error) {
	s := cursor(b)
	if !s.skip(2+32) || !s.skipVec(1) || !s.skipVec(2) || !s.skipVec(1) {
		return "", false, errNotClientHello
	}
	if len(s) == 0 {
		return "", false, nil // no extensions
	}
	exts, ok := s.vec(2)
	if !ok || len(s) != 0 {
		return "", false, errNotClientHello
	}
	seen := map[uint16]bool{}
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec(2)
		if !ok1 || !ok2 || seen[typ] {
			return "", false, errNotClientHello
		}
		seen[typ] = true
		if typ != 0 {
			continue
		}
		list, ok := data.vec(2)
		if !ok || len(data) != 0 || len(list) == 0 {
			return "", false, errNotClientHello
		}
		for len(list) > 0 {
			nt, ok1 := list.u8()
			name, ok2 := list.vec(2)
			if !ok1 || !ok2 {
				return "", false, errNotClientHello
			}
			if nt == 0 {
				if has || len(name) == 0 {
					return "", false, errNotClientHello
				}
				sni, has = string(name), true
			}
		}
	}
	return sni, has, nil
}

type cursor []byte

func (c *cursor) skip(n int) bool {
	if len(*c) < n {
		return false
	}
	*c = (*c)[n:]
	return true
}

func (c *cursor) u8() (byte, bool) {
	if len(*c) < 1 {
		return 0, false
	}
	v := (*c)[0]
	*c = (*c)[1:]
	return v, true
}

func (c *cursor) u16() (uint16, bool) {
	if len(*c) < 2 {
		return 0, false
	}
	v := uint16((*c)[0])<<8 | uint16((*c)[1])
	*c = (*c)[2:]
	return v, true
}

func (c *cursor) vec(lenBytes int) (cursor, bool) {
	if len(*c) < lenBytes {
		return nil, false
	}
	n := 0
	for i := 0; i < lenBytes; i++ {
		n = n<<8 | int((*c)[i])
	}
	*c = (*c)[lenBytes:]
	if len(*c) < n {
		return nil, false
	}
	v := (*c)[:n]
	*c = (*c)[n:]
	return v, true
}

func (c *cursor) skipVec(lenBytes int) bool {
	_, ok := c.vec(lenBytes)
	return ok
}
