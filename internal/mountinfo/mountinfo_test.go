package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:         "/plain",
		`/a\040b`:        "/a b",
		`/tab\011x\134y`: "/tab\tx\\y",
		`/end\040`:       "/end ",
		`/bad\09x`:       `/bad\09x`, // not octal: kept
		`/short\04`:      `/short\04`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	const mi = `22 1 0:21 / / rw,relatime shared:1 - tmpfs corral-root rw
36 22 98:0 /mnt1 /grants ro,nosuid master:7 - tmpfs corral-slots rw
40 36 98:0 /docs /grants/ro/docs ro,nosuid,nodev master:7 propagate_from:3 - ext4 /dev/x rw
41 40 0:30 / /grants/ro/docs/sub\040dir ro shared:9 master:8 - tmpfs none rw
50 22 0:31 / /tmp rw - tmpfs tmpfs rw
short line
`
	es := Parse(mi)
	if len(es) != 5 {
		t.Fatalf("Parse: %d entries, want 5: %+v", len(es), es)
	}
	if e := es[2]; e.ID != 40 || e.Parent != 36 || e.Point != "/grants/ro/docs" || !e.ReadOnly() || e.Master() != 7 || len(e.Optional) != 2 {
		t.Errorf("entry 2: %+v (ro %v master %d)", e, e.ReadOnly(), e.Master())
	}
	if e := es[3]; e.Point != "/grants/ro/docs/sub dir" || e.Master() != 8 {
		t.Errorf("entry 3: %+v", e)
	}
	if e := es[4]; e.ReadOnly() || e.Master() != 0 || len(e.Optional) != 0 {
		t.Errorf("entry 4: %+v", e)
	}
	if got := Subtree(es, 36); len(got) != 3 || got[0] != 36 || got[1] != 40 || got[2] != 41 {
		t.Errorf("Subtree(36) = %v, want [36 40 41]", got)
	}
	if got := Subtree(es, 99); got != nil {
		t.Errorf("Subtree(99) = %v, want none", got)
	}
}
