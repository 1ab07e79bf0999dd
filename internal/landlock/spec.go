package landlock

// Spec is one Landlock ruleset.
type Spec struct {
	Enabled     bool     `json:"enabled"`
	Required    bool     `json:"required"`
	RODirs      []string `json:"ro_dirs,omitempty"`
	ROFiles     []string `json:"ro_files,omitempty"`
	RWDirs      []string `json:"rw_dirs,omitempty"`
	RWFiles     []string `json:"rw_files,omitempty"`
	DenyTCP     bool     `json:"deny_tcp"`               // handle TCP bind/connect: none allowed but the connect ports
	ConnectPort int      `json:"connect_port,omitempty"` // a TCP port connect(2) may reach (the egress proxy's)
	// ConnectPorts are more TCP ports connect(2) may reach (the consent
	// channel's, provider.ConsentPort), besides ConnectPort.
	ConnectPorts []int `json:"connect_ports,omitempty"`
	// ServePorts are TCP ports the workload may bind(2) and connect(2) to:
	// a service's own listeners, in its own network namespace.
	ServePorts []int `json:"serve_ports,omitempty"`
	// BindAny, with DenyTCP, leaves bind(2) unrestricted (connect stays
	// as above): for a sandbox whose network namespace is its own, where
	// a listener is reached only through corral (sandbox forward).
	BindAny bool `json:"bind_any,omitempty"`
}

// Connects is every TCP port connect(2) may reach with DenyTCP, besides
// ServePorts: ConnectPort then ConnectPorts, without zeros or repeats.
func (s Spec) Connects() []int {
	var out []int
	for _, p := range append([]int{s.ConnectPort}, s.ConnectPorts...) {
		dup := false
		for _, q := range out {
			dup = dup || q == p
		}
		if p != 0 && !dup {
			out = append(out, p)
		}
	}
	return out
}
