// Package jks writes Java KeyStore (JKS) trust stores: the format Java's
// cacerts has used since JDK 1.2, which every JDK still reads (JDK 9+
// reads it even where its default type is PKCS12: keystore.type.compat).
//
// The layout is sun.security.provider.JavaKeyStore's: the magic
// 0xFEEDFEED, version 2, the entry count, then per trusted certificate
// the tag 2, its alias (modified UTF-8 with a 2-byte length), the
// creation time in milliseconds, the type "X.509" and the DER
// certificate with a 4-byte length; and last a SHA-1 digest over the
// password as UTF-16BE, the words "Mighty Aphrodite" and everything
// before it (the store's integrity check).
package jks

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf16"
)

// TrustStore encodes the DER certificates as trusted-certificate entries
// named cert0, cert1, ... with the integrity digest for password (Java's
// cacerts use "changeit"; a reader without a password skips the check).
func TrustStore(ders [][]byte, password string, created time.Time) ([]byte, error) {
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.BigEndian, v) }
	w(uint32(0xFEEDFEED))
	w(uint32(2))
	w(uint32(len(ders)))
	ms := created.UnixMilli()
	for i, der := range ders {
		if len(der) == 0 {
			return nil, errors.New("jks: an empty certificate")
		}
		w(uint32(2)) // trusted certificate entry
		writeUTF(&b, fmt.Sprintf("cert%d", i))
		w(ms)
		writeUTF(&b, "X.509")
		w(uint32(len(der)))
		b.Write(der)
	}
	h := sha1.New()
	for _, u := range utf16.Encode([]rune(password)) {
		h.Write([]byte{byte(u >> 8), byte(u)})
	}
	h.Write([]byte("Mighty Aphrodite"))
	h.Write(b.Bytes())
	b.Write(h.Sum(nil))
	return b.Bytes(), nil
}

// writeUTF writes s as Java's DataOutput.writeUTF does for ASCII, which
// is all the aliases and type names here are.
func writeUTF(b *bytes.Buffer, s string) {
	binary.Write(b, binary.BigEndian, uint16(len(s)))
	b.WriteString(s)
}
