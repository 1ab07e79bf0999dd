// Command svcgateway is the agent gateway of the service tests (e2e/windows
// service_test.go), built for the host or for Windows: it counts its starts
// in $HOME/state/starts (the state a session keeps across restarts and an
// export carries), listens on 127.0.0.1:PORT (its first argument) and
// answers each connection with one line,
//
//	starts=N home=HOME user=USERNAME payload=CORRAL_PAYLOAD appdata=APPDATA
//
// and exits 3 on a connection that sends "crash\n".
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: svcgateway PORT")
		os.Exit(2)
	}
	home := os.Getenv("HOME")
	state := filepath.Join(home, "state", "starts")
	if err := os.MkdirAll(filepath.Dir(state), 0o700); err != nil {
		fail(err)
	}
	b, _ := os.ReadFile(state)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	n++
	if err := os.WriteFile(state, []byte(strconv.Itoa(n)+"\n"), 0o600); err != nil {
		fail(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fail(err)
	}
	fmt.Printf("svcgateway: start %d listening on %s\n", n, l.Addr())
	for {
		c, err := l.Accept()
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(c, "starts=%d home=%s user=%s payload=%s appdata=%s\n", n, home, os.Getenv("USERNAME"), os.Getenv("CORRAL_PAYLOAD"), os.Getenv("APPDATA"))
		_ = c.(*net.TCPConn).CloseWrite()
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line == "crash\n" {
			fmt.Println("svcgateway: crashing as asked")
			os.Exit(3)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "svcgateway:", err)
	os.Exit(1)
}
