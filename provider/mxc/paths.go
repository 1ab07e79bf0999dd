package mxc

import (
	"strings"

	"github.com/corral-sandbox/corral/policy"
)

// winPath checks p as a concrete Windows path for MXC and returns its
// clean form (policy.WinClean), or a problem: a Linux-rooted path ("/usr")
// has no honest Windows translation (/usr is not C:\usr), and the forms a
// Windows policy refuses (UNC and device namespaces, drive-relative paths,
// streams, trailing dots or spaces, reserved names: policy.
// WindowsPathProblem) are refused here too, whatever the policy's OS.
func winPath(p string) (clean, problem string) {
	if strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") {
		return "", p + ` is a Linux-rooted path: mxc does not translate it to a Windows path (write a drive path such as C:\...)`
	}
	if msg, hint := policy.WindowsPathProblem(p); msg != "" {
		return "", msg + " (" + hint + ")"
	}
	return policy.WinClean(p), ""
}
