// Package testcert makes the certificates of Corral's loopback test
// origins (qualify, doctor, the conformance suite, e2e): never a
// sandbox's CA, which is egress.NewCA's.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"time"
)

// New makes an ECDSA P-256 certificate valid for a day: a server
// certificate for the DNS names, or a CA when there are none; signed by
// ca, or self-signed when ca is nil.
func New(ca *tls.Certificate, names ...string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "corral qualify test CA"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if len(names) == 0 {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.Subject.CommonName, tmpl.DNSNames = names[0], names
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	parent, signer := tmpl, any(key)
	if ca != nil {
		if parent, err = x509.ParseCertificate(ca.Certificate[0]); err != nil {
			return tls.Certificate{}, err
		}
		signer = ca.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Issue mints a fresh test CA, writes its certificate (PEM) to caFile
// with mode 0644 (network.upstream_ca: corral reads it, perhaps as
// another user than the caller) and returns a server certificate for the
// DNS names signed by it.
func Issue(caFile string, names ...string) (tls.Certificate, error) {
	ca, err := New(nil)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := New(&ca, names...)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate[0]}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return leaf, nil
}
