package landlock

// Spec is one Landlock ruleset.
type Spec struct {
	Enabled     bool     `json:"enabled"`
	Required    bool     `json:"required"`
	RODirs      []string `json:"ro_dirs,omitempty"`
	ROFiles     []string `json:"ro_files,omitempty"`
	RWDirs      []string `json:"rw_dirs,omitempty"`
	RWFiles     []string `json:"rw_files,omitempty"`
	DenyTCP     bool     `json:"deny_tcp"`               // handle TCP bind/connect: none allowed but ConnectPort
	ConnectPort int      `json:"connect_port,omitempty"` // the one TCP port connect(2) may reach (the proxy)
	// ServePorts are TCP ports the workload may bind(2) and connect(2) to:
	// a service's own listeners, in its own network namespace.
	ServePorts []int `json:"serve_ports,omitempty"`
}
