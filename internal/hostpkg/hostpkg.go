// Package hostpkg names the command that installs a piece of software
// Corral needs with this host's package manager, so that `corral doctor`
// can say the exact fix. The distribution comes from os-release(5)'s ID
// and ID_LIKE; the package names are each distribution's own (Debian's
// docker.io and busybox-static, Fedora's moby-engine, ...).
package hostpkg

import (
	"bufio"
	"bytes"
	"os"
	"strings"
)

// Need is software Corral can use: a key of the packages table.
type Need string

const (
	Docker  Need = "docker"  // a Docker Engine daemon, for the docker provider
	Busybox Need = "busybox" // a static busybox, for corral image build-base
)

// Manager is a package manager: its name and its install command.
type Manager struct {
	Name    string // apt, dnf, apk, pacman, zypper; "" when unknown
	Install string // the command before the package names
	family  string // the os-release ID the packages table is keyed by
}

// families maps os-release IDs (and ID_LIKE words) to a package family.
var families = map[string]Manager{
	"debian":   {"apt", "apt-get install -y", "debian"},
	"ubuntu":   {"apt", "apt-get install -y", "debian"},
	"fedora":   {"dnf", "dnf install -y", "fedora"},
	"rhel":     {"dnf", "dnf install -y", "fedora"},
	"centos":   {"dnf", "dnf install -y", "fedora"},
	"alpine":   {"apk", "apk add", "alpine"},
	"arch":     {"pacman", "pacman -S --noconfirm", "arch"},
	"opensuse": {"zypper", "zypper install -y", "suse"},
	"suse":     {"zypper", "zypper install -y", "suse"},
}

// packages names each need's package per family.
var packages = map[Need]map[string]string{
	Docker:  {"debian": "docker.io", "fedora": "moby-engine", "alpine": "docker", "arch": "docker", "suse": "docker"},
	Busybox: {"debian": "busybox-static", "fedora": "busybox", "alpine": "busybox-static", "arch": "busybox", "suse": "busybox-static"},
}

// Detect reads the package manager from an os-release file's content:
// ID first, then each ID_LIKE word. An unknown distribution gives the
// zero Manager.
func Detect(osRelease []byte) Manager {
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(osRelease))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok {
			vals[k] = strings.Trim(v, `"'`)
		}
	}
	for _, id := range append([]string{vals["ID"]}, strings.Fields(vals["ID_LIKE"])...) {
		if m, ok := families[strings.ToLower(id)]; ok {
			return m
		}
		if strings.HasPrefix(id, "opensuse") {
			return families["opensuse"]
		}
	}
	return Manager{}
}

// Host is Detect of /etc/os-release, or /usr/lib/os-release without it.
func Host() Manager {
	for _, f := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if b, err := os.ReadFile(f); err == nil {
			return Detect(b)
		}
	}
	return Manager{}
}

// Command is the shell command that installs need with m, or "" when m
// or its package for need is unknown.
func (m Manager) Command(need Need) string {
	pkg := packages[need][m.family]
	if m.Name == "" || pkg == "" {
		return ""
	}
	return m.Install + " " + pkg
}
