package egress

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// CA is one sandbox's interception authority. Its root is ECDSA P-256,
// minted by NewCA; the private key exists only in this process's memory
// (never written anywhere). The root is limited to server authentication
// (EKU) and name-constrained (RFC 5280 §4.2.1.10, critical) to the hosts
// of the policy's inspected allow rules: a name rule permits that DNS
// name and excludes the names below it (which RFC 5280 would let it
// vouch for too) unless a wildcard rule covers them; a wildcard rule
// permits the subtree below its domain (any depth: X.509 cannot say "one
// label"); an IP or CIDR rule permits that range. With no IP rule every
// IP address is excluded, with no name rule every name. A leaked key can
// therefore impersonate nothing else to a client that enforces name
// constraints (Go, OpenSSL 3, GnuTLS, Python, Node do).
//
// Leaves are P-256 too, share one key (as mitmproxy and sandbox-runtime
// do: minting is then a signature, ~0.35 ms), carry the SAN of the
// host, an Authority and a Subject Key Identifier (Python 3.13's strict
// verification requires the AKI), serverAuth, and live 24 hours
// (backdated one hour for clock skew); they are cached by host, at most
// leafCacheSize, least recently used first out, and reminted an hour
// before they expire.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey
	pem     []byte
	hosts   []string // the inspected hosts it was minted for (InspectedHosts)
	dns     []string
	ips     []netip.Prefix

	mu     sync.Mutex
	leaves map[string]*list.Element // host -> *leafEntry
	lru    *list.List
	now    func() time.Time
}

type leafEntry struct {
	host string
	cert *tls.Certificate
}

const (
	leafCacheSize = 1024
	leafLifetime  = 24 * time.Hour
	// caLifetime bounds a sandbox's root: a sandbox that lives longer
	// gets a new one when its session is recovered.
	caLifetime = 397 * 24 * time.Hour
)

// InspectedHosts returns the host patterns of p's inspected allow rules,
// sorted and without duplicates, as written ("api.example.com",
// "*.example.com", "10.0.0.0/8"); empty when nothing is inspected.
func InspectedHosts(p Policy) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range p.Allow {
		if r.inspected() && !seen[r.Host] {
			seen[r.Host] = true
			out = append(out, r.Host)
		}
	}
	sort.Strings(out)
	return out
}

// NewCA mints a sandbox's CA constrained to the inspected hosts of p
// (InspectedHosts); it fails on a policy Validate refuses or one with
// nothing to inspect.
func NewCA(p Policy) (*CA, error) {
	cp, err := compilePolicy(p)
	if err != nil {
		return nil, fmt.Errorf("egress policy: %w", err)
	}
	c := &CA{hosts: InspectedHosts(p), leaves: map[string]*list.Element{}, lru: list.New(), now: time.Now}
	for _, r := range cp.allow {
		if !r.inspect {
			continue
		}
		if r.kind == kindPrefix {
			c.ips = append(c.ips, r.prefix)
		} else {
			c.dns = append(c.dns, r.name) // ".example.com" for wildcards: the subtree below
		}
	}
	if len(c.dns) == 0 && len(c.ips) == 0 {
		return nil, errors.New("no allow rule is inspected")
	}
	if c.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	if c.leafKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	now := c.now()
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{Organization: []string{"Corral sandbox"}, CommonName: "Corral sandbox egress CA " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(caLifetime),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		SubjectKeyId:                keyID(&c.key.PublicKey),
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         c.dns,
		ExcludedDNSDomains:          c.below(),
		// Server certificates only: a leaked key mints no client or
		// code-signing certificate a verifier that checks the chain's
		// EKU (Go, OpenSSL) accepts.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if len(c.dns) == 0 {
		// Only IPs inspected: an empty permitted list constrains
		// nothing, so every name is excluded ("" matches them all,
		// RFC 5280 §4.2.1.10 as Go and OpenSSL read it).
		tmpl.ExcludedDNSDomains = []string{""}
	}
	for _, p := range c.ips {
		tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, ipNet(p))
	}
	if len(c.ips) == 0 {
		tmpl.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &c.key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("mint the sandbox CA: %w", err)
	}
	if c.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	c.pem = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return c, nil
}

// CertPEM is the root's certificate (PEM), what the sandbox must trust.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.pem...) }

// Certificate is the root's certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Covers reports whether every inspected host of p lies within the CA's
// name constraints, so that a proxy for p can serve it leaves: a live
// policy change that inspects a host outside them needs a new CA (and a
// new trust bundle in the sandbox).
func (c *CA) Covers(p Policy) bool {
	cp, err := compilePolicy(p)
	return err == nil && c.covers(cp)
}

func (c *CA) covers(cp *compiledPolicy) bool {
	for _, r := range cp.allow {
		if !r.inspect {
			continue
		}
		if r.kind == kindPrefix {
			if !c.coversPrefix(r.prefix) {
				return false
			}
		} else if !c.coversName(r.name) {
			return false
		}
	}
	return true
}

func (c *CA) coversPrefix(p netip.Prefix) bool {
	for _, q := range c.ips {
		if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// coversName reports whether name (a host, or ".domain" for a subtree)
// is within the CA's constraints: a permitted ".example.com" holds the
// names below example.com, a permitted "example.com" only itself (the
// names below it are excluded, see below).
func (c *CA) coversName(name string) bool {
	for _, d := range c.dns {
		if strings.HasPrefix(d, ".") { // name below it, or a wildcard rule's own subtree
			if strings.HasSuffix(name, d) {
				return true
			}
		} else if name == d {
			return true
		}
	}
	return false
}

// below is ".name" for each exact name of the CA that no wildcard's
// subtree covers: the names RFC 5280 would let a permitted "name" vouch
// for, which its rule does not allow.
func (c *CA) below() []string {
	var out []string
	for _, d := range c.dns {
		if strings.HasPrefix(d, ".") || c.coversWild(d) {
			continue
		}
		out = append(out, "."+d)
	}
	return out
}

// coversWild reports whether a wildcard subtree of the CA holds name.
func (c *CA) coversWild(name string) bool {
	for _, w := range c.dns {
		if strings.HasPrefix(w, ".") && strings.HasSuffix(name, w) {
			return true
		}
	}
	return false
}

// leaf returns the certificate for host (a canonical name or IP literal),
// minting it when absent or within an hour of expiry.
func (c *CA) leaf(host string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	if e, ok := c.leaves[host]; ok {
		le := e.Value.(*leafEntry)
		if now.Add(time.Hour).Before(le.cert.Leaf.NotAfter) {
			c.lru.MoveToFront(e)
			c.mu.Unlock()
			return le.cert, nil
		}
		c.lru.Remove(e)
		delete(c.leaves, host)
	}
	c.mu.Unlock()
	cert, err := c.mint(host, now)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.leaves[host]; ok { // minted concurrently
		return e.Value.(*leafEntry).cert, nil
	}
	c.leaves[host] = c.lru.PushFront(&leafEntry{host, cert})
	for c.lru.Len() > leafCacheSize {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.leaves, old.Value.(*leafEntry).host)
	}
	return cert, nil
}

func (c *CA) mint(host string, now time.Time) (*tls.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber:   serial(),
		Subject:        pkix.Name{CommonName: host},
		NotBefore:      now.Add(-time.Hour),
		NotAfter:       now.Add(leafLifetime),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		SubjectKeyId:   keyID(&c.leafKey.PublicKey),
		AuthorityKeyId: c.cert.SubjectKeyId,
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("mint a leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: c.leafKey, Leaf: leaf}, nil
}

// serial is a random positive 127-bit serial number (RFC 5280 §4.1.2.2:
// at most 20 octets; CA/B Forum: at least 64 random bits).
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// keyID is RFC 5280 §4.2.1.2 method 1: SHA-1 of the subjectPublicKey bits.
func keyID(pub *ecdsa.PublicKey) []byte {
	b, _ := pub.Bytes()
	h := sha1.Sum(b)
	return h[:]
}

func ipNet(p netip.Prefix) *net.IPNet {
	bits := p.Addr().BitLen()
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}
