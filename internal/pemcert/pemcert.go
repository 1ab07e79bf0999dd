// Package pemcert reads PEM certificate bundles (a sandbox's trust
// bundle, the host's system roots).
package pemcert

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// Split returns the DER of each CERTIFICATE block of a PEM bundle, in
// order, and the types of its other blocks (text between blocks is
// skipped, as pem.Decode does).
func Split(bundle []byte) (certs [][]byte, others []string) {
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return certs, others
		}
		if b.Type == "CERTIFICATE" {
			certs = append(certs, b.Bytes)
		} else {
			others = append(others, b.Type)
		}
	}
}

// Parse returns the certificates of a bundle that must hold nothing
// else: a block of another type (a key, say) or a certificate that does
// not parse is an error.
func Parse(bundle []byte) ([]*x509.Certificate, error) {
	ders, others := Split(bundle)
	if len(others) > 0 {
		return nil, fmt.Errorf("the bundle holds a %s block", others[0])
	}
	var certs []*x509.Certificate
	for i, der := range ders {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("bundle certificate %d: %w", i, err)
		}
		certs = append(certs, c)
	}
	return certs, nil
}
