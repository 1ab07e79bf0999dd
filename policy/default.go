package policy

import (
	_ "embed"
	"slices"
)

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

// DefaultEnvPassWindows is DefaultEnvPass for a Windows policy: what
// cmd.exe, PowerShell and the C runtime need to start and find programs
// (SystemRoot: Winsock and many DLLs fail without it; ComSpec, PATHEXT),
// and machine facts; nothing of the user's profile (USERPROFILE, APPDATA,
// LOCALAPPDATA name a tree the sandbox cannot see). Names compare without
// case, as Windows does. TEMP and TMP are the provider's: a private
// directory per sandbox.
var DefaultEnvPassWindows = []string{"PATH", "PATHEXT", "SystemRoot", "SystemDrive", "windir", "ComSpec", "OS",
	"PROCESSOR_ARCHITECTURE", "PROCESSOR_IDENTIFIER", "PROCESSOR_LEVEL", "PROCESSOR_REVISION", "NUMBER_OF_PROCESSORS",
	"LANG", "TZ", "TERM", "COLORTERM", "NO_COLOR"}

// defaultEnvPass is the env.pass list a policy for target has when it
// writes none.
func defaultEnvPass(target OS) []string {
	if target == OSWindows {
		return DefaultEnvPassWindows
	}
	return DefaultEnvPass
}

// DefaultPATHWindows is the workload's PATH on Windows when none is
// passed or set.
const DefaultPATHWindows = `C:\Windows\system32;C:\Windows;C:\Windows\System32\Wbem;C:\Windows\System32\WindowsPowerShell\v1.0\`

// optional is a list of optional path rules.
func optional(paths ...string) []PathRule {
	rules := make([]PathRule, len(paths))
	for i, p := range paths {
		rules[i] = PathRule{Path: p, Optional: true}
	}
	return rules
}

// DefaultFor is the built-in policy for target: Default for OSLinux,
// defaultWindows for OSWindows.
func DefaultFor(target OS) *Policy {
	if target == OSWindows {
		return defaultWindows()
	}
	return Default()
}

// defaultWindows is the built-in policy for Windows (what `corral run`
// uses there without --policy; DefaultYAMLWindows is it written out):
//
//   - filesystem: C:\Windows, C:\Program Files and C:\Program Files (x86)
//     read-only (optional: a host may lack one, or have Windows on another
//     drive — then write your own); the registry hives
//     (C:\Windows\System32\config) and Setup's answer files
//     (C:\Windows\Panther, which can hold passwords) denied; the working
//     directory read-write with DefaultProtected read-only inside it.
//     The profile and other users' data are not granted, so unreachable.
//   - network: none; unix_sockets allow (on Windows an AF_UNIX socket is a
//     file, reached only through the path grants).
//   - process: DefaultEnvPassWindows; no limits (MXC enforces none but
//     process.timeout: a limit written here would be a warning).
//   - layers: all optional — they are Linux mechanisms (namespaces, mount
//     tree, Landlock, seccomp, cgroups) with no Windows counterpart; MXC's
//     own boundary enforces the filesystem and network rules.
func defaultWindows() *Policy {
	include := true
	layers := Layers{}
	for _, l := range AllLayers {
		layers[l] = Optional
	}
	return &Policy{
		Version: Version,
		Filesystem: Filesystem{
			ReadOnly:       optional(`C:\Windows`, `C:\Program Files`, `C:\Program Files (x86)`),
			Deny:           optional(`C:\Windows\System32\config`, `C:\Windows\Panther`),
			IncludeWorkdir: &include,
		},
		Network: Network{Mode: NetworkNone, UnixSockets: UnixSocketsAllow},
		Process: Process{Env: Env{Pass: slices.Clone(DefaultEnvPassWindows)}},
		Layers:  layers,
		os:      OSWindows,
	}
}

// DefaultYAMLWindows is defaultWindows written out as a commented policy
// file; a test keeps the two equal.
//
//go:embed default_windows.yaml
var DefaultYAMLWindows []byte

// DefaultYAMLFor is DefaultYAML or DefaultYAMLWindows, by target.
func DefaultYAMLFor(target OS) []byte {
	if target == OSWindows {
		return DefaultYAMLWindows
	}
	return DefaultYAML
}

// Default returns the built-in policy for Linux (DefaultFor gives the
// host's), used when no policy file is given:
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
	include := true
	return &Policy{
		Version: Version,
		Filesystem: Filesystem{
			ReadOnly:       optional("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/usr/local"),
			Deny:           optional("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh"),
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
		os:     OSLinux,
	}
}

// DefaultYAML is Default written out as a commented policy file; a test
// keeps the two equal.
//
//go:embed default.yaml
var DefaultYAML []byte
