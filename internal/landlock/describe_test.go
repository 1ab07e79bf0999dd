//go:build linux

package landlock

import "testing"

func TestTCPDescription(t *testing.T) {
	for _, c := range []struct {
		conn, serve []int
		want        string
	}{
		{nil, nil, "tcp"},
		{[]int{3128}, nil, "tcp (connect only to port 3128)"},
		{[]int{3128, 3129}, nil, "tcp (connect only to ports [3128 3129])"},
		{[]int{3129}, []int{8080}, "tcp (bind only to ports [8080], connect only to ports [3129 8080])"},
		{nil, []int{8080}, "tcp (bind only to ports [8080], connect only to ports [8080])"},
	} {
		if got := tcpDescription(c.conn, c.serve); got != c.want {
			t.Errorf("tcpDescription(%v, %v) = %q, want %q", c.conn, c.serve, got, c.want)
		}
	}
}
