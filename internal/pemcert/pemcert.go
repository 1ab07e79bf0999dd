// Package pemcert reads PEM certificate bundles (a sandbox's trust
// bundle, the host's system roots).
package pemcert

import "encoding/pem"

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
