package policy

import _ "embed"

// DefaultProtected is used when Filesystem.Protected is nil: files that let a
// workload run code outside the sandbox later, credentials (.ssh) and
// Corral's own configuration and state. Each is matched under every
// read-write root.
//
// The whole .git directory is protected, not only hooks and config: git
// also takes hooks and config from the directory named in .git/commondir,
// from .git/config.worktree and from .git/modules/*, and a missing path
// cannot be bound over. Read-only .git keeps git status, diff and log
// working; commits must then happen outside the sandbox (or list
// protected paths without .git).
var DefaultProtected = []string{
	".git",
	".bashrc", ".bash_profile", ".bash_login", ".profile",
	".zshrc", ".zprofile", ".zshenv",
	".ssh",
	".config/corral", ".local/state/corral",
}

// DefaultEnvPass is used when Env.Pass is nil: the variables a typical
// command-line tool needs and that carry no secrets.
var DefaultEnvPass = []string{"PATH", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "COLORTERM", "NO_COLOR"}

// DefaultPATH is the workload's PATH when none is passed or set.
const DefaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Default returns the built-in policy, used when no policy file is given:
//
//   - filesystem: the system directories /usr, /bin, /sbin, /lib, /lib32,
//     /lib64, /libx32, /etc, /opt and /usr/local read-only (all optional,
//     since hosts differ); /etc/shadow, /etc/gshadow, /etc/sudoers,
//     /etc/sudoers.d and /etc/ssh denied (optional); the working directory
//     read-write; DefaultProtected kept read-only inside it. Nothing else of
//     the host, in particular not the home directory, is visible.
//   - network: none (loopback only).
//   - process: DefaultEnvPass; the caller's uid.
//   - limits: memory 2 GiB, 1024 tasks, 2 CPU cores, 4096 open files — room
//     for compilers, test runners and package managers, while stopping fork
//     bombs and runaway memory before they hurt the host; no timeout.
//   - layers: all required.
//
// Each call returns a fresh copy.
func Default() *Policy {
	opt := func(paths ...string) []PathRule {
		rules := make([]PathRule, len(paths))
		for i, p := range paths {
			rules[i] = PathRule{Path: p, Optional: true}
		}
		return rules
	}
	include := true
	return &Policy{
		Version: Version,
		Filesystem: Filesystem{
			ReadOnly:       opt("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/usr/local"),
			Deny:           opt("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh"),
			IncludeWorkdir: &include,
		},
		Network: Network{Mode: NetworkNone},
		Process: Process{
			Limits: Limits{
				Memory: 2 << 30,
				Pids:   1024,
				CPU:    2,
				Nofile: 4096,
			},
		},
		Layers: Layers{},
	}
}

// DefaultYAML is Default written out as a commented policy file; a test
// keeps the two equal.
//
//go:embed default.yaml
var DefaultYAML []byte
