package landlock

import (
	"slices"
	"testing"
)

func TestConnects(t *testing.T) {
	for _, c := range []struct {
		s    Spec
		want []int
	}{
		{Spec{}, nil},
		{Spec{ConnectPort: 3128}, []int{3128}},
		{Spec{ConnectPorts: []int{3129}}, []int{3129}},
		{Spec{ConnectPort: 3128, ConnectPorts: []int{3129, 3128, 0}}, []int{3128, 3129}},
	} {
		if got := c.s.Connects(); !slices.Equal(got, c.want) {
			t.Errorf("%+v.Connects() = %v, want %v", c.s, got, c.want)
		}
	}
}
