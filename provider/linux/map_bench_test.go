//go:build linux

package linux

import (
	"context"
	"testing"

	"github.com/corral-sandbox/corral/policy"
)

func BenchmarkResolveAndPlan(b *testing.B) {
	wd := b.TempDir()
	p := New()
	for i := 0; i < b.N; i++ {
		pol := policy.Default()
		r, err := pol.Resolve(policy.Context{Home: "/root", Workdir: wd})
		if err != nil {
			b.Fatal(err)
		}
		if _, loss := p.Map(context.Background(), r); loss.HasErrors() {
			b.Fatal(loss)
		}
	}
}
