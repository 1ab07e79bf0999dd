package policy

import _ "embed"

// DefaultProtected is used when Filesystem.Protected is nil: names that
// make a host tool run code later, outside the sandbox, when a person or
// their tools touch the tree; credentials; Corral's own configuration and
// state. Each is matched under every read-write root; single names (".git")
// also at any depth below it (a nested repository). One that does not exist
// when a run starts cannot be created at the top of a read-write root
// (Resolved.Placeholders); created deeper, it is reported after the run.
// Why each is there (docs/policy.md has the table):
//
//   - .git: hooks, config (core.fsmonitor, core.hooksPath, filter drivers,
//     credential helpers...), info/attributes, modules/*, commondir and
//     config.worktree all make git run commands; the whole directory is
//     kept read-only (git status, diff and log still work; see GitCommit
//     for a mode in which the agent can commit). .gitmodules (submodule
//     URLs and update commands) and .gitconfig (a config a home-like tree
//     carries) likewise.
//   - shell start-up files: bash, sh and zsh run them at every login or
//     interactive shell.
//   - .envrc (direnv runs it on cd), .npmrc (npm runs its script-shell,
//     git and node-options from it): run on use.
//   - agent configuration: .mcp.json (MCP servers are commands an agent
//     starts), .claude, .codex, .agents, .cursor, .gemini (settings with
//     hooks and MCP servers). AGENTS.md, CLAUDE.md are data and stay
//     writable.
//   - IDE configuration: .vscode (tasks.json runs on folder open,
//     settings pick interpreters and terminals), .idea (run
//     configurations, startup tasks), .devcontainer (a container a person
//     builds and runs), .husky (the common core.hooksPath).
//   - package-manager and cloud configuration that runs helpers or holds
//     tokens: .docker (credential helpers in config.json), .kube (exec
//     credential plugins in config), .aws (credential_process).
//   - .ssh: keys and config (ProxyCommand).
//   - more of the same kinds: .devcontainer.json (initializeCommand runs
//     on the host), .zed, .continue, .windsurf, .kiro, .roo,
//     opencode.json (editor and agent settings), .yarnrc, .yarnrc.yml
//     (yarnPath), .pnpmfile.cjs (pnpm runs it).
var DefaultProtected = []string{
	".git", ".gitmodules", ".gitconfig",
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zprofile", ".zshenv", ".zlogin", ".zlogout",
	".envrc", ".npmrc",
	".mcp.json", ".claude", ".codex", ".agents", ".cursor", ".gemini",
	".vscode", ".idea", ".devcontainer", ".husky",
	".docker", ".kube", ".aws",
	".ssh",
	".config/corral", ".local/state/corral",
	".devcontainer.json", ".zed", ".continue", ".windsurf", ".kiro", ".roo", "opencode.json",
	".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs",
}

// noPlaceholder are protected names that get no placeholder when absent
// (one the workload makes is reported after the run): an empty directory
// there would break the tool that reads the name (yarn, pnpm and opencode
// fail on a directory where their configuration goes; git takes a present
// commondir to mean another repository).
var noPlaceholder = map[string]bool{".yarnrc": true, ".yarnrc.yml": true, ".pnpmfile.cjs": true, "opencode.json": true, ".devcontainer.json": true, "commondir": true}

// GitCommitProtected replaces ".git" in the protected list when
// filesystem.git is "commit": the parts of a repository that make git run
// commands or read another repository's, while objects, refs, the index,
// logs and packed-refs stay writable so the agent can commit. What this
// leaves open is in docs/policy.md: history can be rewritten (refs are
// writable), objects/info/alternates can point git at objects elsewhere,
// and a .gitattributes in the worktree can select filter or diff drivers
// that the person's own configuration already defines.
var GitCommitProtected = []string{".git/hooks", ".git/config", ".git/config.worktree", ".git/info", ".git/modules", ".git/commondir", ".git/worktrees"}

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
//   - network: none (loopback only); unix_sockets DefaultUnixSockets.
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
		Network: Network{Mode: NetworkNone, UnixSockets: DefaultUnixSockets},
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
