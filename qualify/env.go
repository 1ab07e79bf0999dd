//go:build linux

package qualify

// Env is one case's environment: made fresh for each case by the runner
// and removed afterwards. Methods are in runner.go.
type Env struct {
	Provider string // "linux"
	Bin      string // the corral binary under test (absolute path)
	Dir      string // the case's own temp dir (0755), removed afterwards
	// Home is a throwaway home (HOME for corral) filled with canary files
	// whose content is a random token: .ssh/id_test, .aws/credentials,
	// .bashrc, .mozilla/firefox/profile/cookies.sqlite,
	// .config/google-chrome/Default/Cookies (CanaryFiles). Tokens maps each
	// relative path to its token.
	Home   string
	Tokens map[string]string
	Root   bool // corral runs as root (the caller, or Options.User)
	// Strict is --strict: the runner turns skips into failures.
	Strict bool

	st *caseState // the runner's bookkeeping for this case (runner.go)
}
