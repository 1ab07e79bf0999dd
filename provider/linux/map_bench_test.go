//go:build linux

package linux

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/corral-sandbox/corral/policy"
)

// BenchmarkResolveAndPlan is the policy work of a `corral run` before
// anything is made: the built-in default resolved for a workdir and
// mapped to a linux plan. "empty" is a fresh directory; "repository" is
// this module's own tree (a real repository, which the read-write vet
// walks).
func BenchmarkResolveAndPlan(b *testing.B) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, wd string }{{"empty", b.TempDir()}, {"repository", repo}} {
		b.Run(c.name, func(b *testing.B) {
			p := New()
			for b.Loop() {
				r, err := policy.Default().Resolve(policy.Context{Home: "/root", Workdir: c.wd})
				if err != nil {
					b.Fatal(err)
				}
				if _, loss := p.Map(context.Background(), r); loss.HasErrors() {
					b.Fatal(loss)
				}
			}
		})
	}
}
