//go:build linux

package main

import (
	"strconv"
	"testing"
)

func TestParsePublish(t *testing.T) {
	for in, want := range map[string]string{
		"18789":                "127.0.0.1:18789>18789",
		"127.0.0.1:18789":      "127.0.0.1:18789>18789",
		"127.0.0.2:8080:18789": "127.0.0.2:8080>18789",
		"localhost:8080":       "127.0.0.1:8080>8080",
		"[::1]:8080:80":        "[::1]:8080>80",
		"8080:80":              "127.0.0.1:8080>80",
	} {
		p, err := parsePublish(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if got := p.Host + ">" + strconv.Itoa(p.Port); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"0.0.0.0:80", "10.0.0.1:80", "::1:80:80", "[::1", "127.0.0.1:0", "127.0.0.1:70000", "x", "192.168.1.1:80:80"} {
		if _, err := parsePublish(in); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
}
