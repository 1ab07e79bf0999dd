// Command corral-scan lists what Corral made that is still on this
// machine (package scan), each check with what it looks at.
//
//	corral-scan [-root /] [-files LIST] [-docker SOCK] [-o json]
//	corral-scan -baseline BEFORE.json [-recheck 3s] ...
//
// -files LIST: the package's paths, one a line (`dpkg-deb -c` output or
// plain paths). -o json writes the checks (the baseline's format). With
// -baseline, what counts is every owned finding and every other one not in
// BEFORE; one of those that is gone again after -recheck belonged to some
// other corral at work on the machine (a test suite), and does not count.
// Exit status: 0 nothing counts, 1 something does (listed), 2 bad usage.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/packaging/scan"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("corral-scan", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", "/", "the scanned system's root")
	files := fl.String("files", "", "the package's paths, one a line (dpkg-deb -c output or paths)")
	sock := fl.String("docker", "/var/run/docker.sock", `docker's socket ("" skips docker)`)
	out := fl.String("o", "text", "output: text or json")
	baseline := fl.String("baseline", "", "a scan taken before (-o json): only owned and new findings count")
	recheck := fl.Duration("recheck", 0, "with -baseline: scan again after this long and count only what is still there")
	if err := fl.Parse(args); err != nil || fl.NArg() != 0 || (*out != "text" && *out != "json") {
		fmt.Fprintln(stderr, "usage: corral-scan [-root DIR] [-files LIST] [-docker SOCK] [-o text|json] [-baseline FILE [-recheck DUR]]")
		return 2
	}
	o := scan.Options{Root: *root}
	if *files != "" {
		list, err := readList(*files)
		if err != nil {
			fmt.Fprintln(stderr, "corral-scan:", err)
			return 2
		}
		o.Files = list
	}
	if *sock != "" {
		o.Docker = scan.DockerSocket(*sock)
	}
	var before []scan.Finding
	if *baseline != "" {
		b, err := os.ReadFile(*baseline)
		var checks []scan.Check
		if err == nil {
			err = json.Unmarshal(b, &checks)
		}
		if err != nil {
			fmt.Fprintln(stderr, "corral-scan: -baseline:", err)
			return 2
		}
		before = scan.Findings(checks)
	}
	ctx := context.Background()
	checks := scan.Scan(ctx, o)
	counts := scan.Findings(checks)
	if *baseline != "" {
		counts = scan.Diff(before, counts)
		if *recheck > 0 && len(counts) > 0 {
			time.Sleep(*recheck)
			still := map[string]bool{}
			for _, f := range scan.Diff(before, scan.Findings(scan.Scan(ctx, o))) {
				still[f.Key()] = true
			}
			var kept []scan.Finding
			for _, f := range counts {
				if still[f.Key()] {
					kept = append(kept, f)
				}
			}
			counts = kept
		}
	}
	if *out == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(checks)
	} else {
		report(stdout, checks, counts, *baseline != "")
	}
	if len(counts) > 0 {
		return 1
	}
	return 0
}

// report writes one line a check (clean, skipped, or how many it found),
// each finding under it, and whether it counts.
func report(w io.Writer, checks []scan.Check, counts []scan.Finding, diffed bool) {
	count := map[string]bool{}
	for _, f := range counts {
		count[f.Key()] = true
	}
	for _, c := range checks {
		switch {
		case c.Skipped != "":
			fmt.Fprintf(w, "skip   %-9s %s: %s\n", c.Name, c.What, c.Skipped)
		case len(c.Found) == 0:
			fmt.Fprintf(w, "clean  %-9s %s\n", c.Name, c.What)
		default:
			fmt.Fprintf(w, "found  %-9s %s\n", c.Name, c.What)
		}
		for _, f := range c.Found {
			mark := "  LEFT  "
			if diffed && !count[f.Key()] {
				mark = "  before"
			}
			owned := ""
			if f.Owned {
				owned = " [package's]"
			}
			fmt.Fprintf(w, "%s %s (%s)%s\n", mark, f.Name, f.Detail, owned)
		}
	}
	fmt.Fprintf(w, "%d left\n", len(counts))
}

// readList reads paths one a line; a `dpkg-deb -c` line's path is its
// sixth field ("./usr/bin/corral").
func readList(p string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) >= 6:
			out = append(out, fs[5])
		case len(fs) == 1:
			out = append(out, fs[0])
		}
	}
	return out, sc.Err()
}
