package hostpkg

import "testing"

// The os-release files are those distributions' own (their first lines).
func TestCommand(t *testing.T) {
	for _, c := range []struct {
		name, osRelease string
		need            Need
		want            string
	}{
		{"debian 13", "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nID=debian\n", Docker, "apt-get install -y docker.io"},
		{"ubuntu 24.04", "NAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\nID=ubuntu\nID_LIKE=debian\n", Busybox, "apt-get install -y busybox-static"},
		{"linux mint", "NAME=\"Linux Mint\"\nID=linuxmint\nID_LIKE=\"ubuntu debian\"\n", Docker, "apt-get install -y docker.io"},
		{"fedora 41", "NAME=\"Fedora Linux\"\nVERSION_ID=41\nID=fedora\n", Docker, "dnf install -y moby-engine"},
		{"rocky", "NAME=\"Rocky Linux\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n", Busybox, "dnf install -y busybox"},
		{"alpine", "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.20.3\n", Docker, "apk add docker"},
		{"arch", "NAME=\"Arch Linux\"\nID=arch\n", Busybox, "pacman -S --noconfirm busybox"},
		{"opensuse tumbleweed", "NAME=\"openSUSE Tumbleweed\"\nID=\"opensuse-tumbleweed\"\nID_LIKE=\"opensuse suse\"\n", Docker, "zypper install -y docker"},
		{"unknown", "NAME=\"NixOS\"\nID=nixos\n", Docker, ""},
		{"empty", "", Docker, ""},
		{"unknown need", "ID=debian\n", Need("nothing"), ""},
	} {
		if got := Detect([]byte(c.osRelease)).Command(c.need); got != c.want {
			t.Errorf("%s: Command(%s) = %q, want %q", c.name, c.need, got, c.want)
		}
	}
}
