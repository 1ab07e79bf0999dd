//go:build linux

// The scan is for a Debian machine's layout (/proc links, unix sockets):
// its tests are Linux's.

package scan

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A system with nothing of Corral's, but with neighbours of each kind that
// the scan must leave out.
func plantClean(t *testing.T, root string) {
	write(t, root, "/etc/passwd", "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:Alice:/home/alice:/bin/sh\ncorralx:x:1001:1001:corral service x:/x:/bin/sh\n")
	write(t, root, "/etc/group", "root:x:0:\nalice:x:1000:\n")
	write(t, root, "/etc/systemd/system/nginx.service", "[Service]\nExecStart=/usr/sbin/nginx\n")
	write(t, root, "/usr/bin/corralctl", "")
	write(t, root, "/usr/share/man/man1/ls.1.gz", "")
	write(t, root, "/var/lib/dpkg/info/coreutils.list", "")
	write(t, root, "/tmp/corral-e2e-svc-1/x", "") // a test's name, not corral's
	write(t, root, "/tmp/corral", "")
	write(t, root, "/proc/42/cmdline", "sleep\x001000\x00")
	symlink(t, root, "/usr/bin/sleep", "/proc/42/exe")
	mkdir(t, root, "/sys/fs/cgroup/memory/user.slice/other")
}

func TestCleanRoot(t *testing.T) {
	root := t.TempDir()
	plantClean(t, root)
	checks := Scan(context.Background(), Options{Root: root, Files: []string{"./usr/", "./usr/share/man/man1/"}, Docker: docker(Container{ID: "c1", Names: []string{"/web"}, Labels: map[string]string{"com.example": "x"}})})
	if f := Findings(checks); len(f) != 0 {
		t.Fatalf("a clean system gave findings: %+v", f)
	}
	for _, c := range checks {
		if c.Skipped != "" || c.What == "" {
			t.Errorf("check %s: skipped %q, what %q", c.Name, c.Skipped, c.What)
		}
	}
}

// Each kind, planted alone over a clean system, is found, with the right
// check and ownership.
func TestFindsEach(t *testing.T) {
	cases := []struct {
		name   string
		plant  func(t *testing.T, root string)
		files  []string
		docker Docker
		want   []Finding // Check, Name, Owned (Detail ignored)
	}{
		{"binary", func(t *testing.T, r string) { write(t, r, "/usr/bin/corral", "") }, nil, nil,
			[]Finding{{Check: "files", Name: "/usr/bin/corral", Owned: true}}},
		{"man page", func(t *testing.T, r string) { write(t, r, "/usr/share/man/man1/corral-service-start.1.gz", "") }, nil, nil,
			[]Finding{{Check: "files", Name: "/usr/share/man/man1/corral-service-start.1.gz", Owned: true}}},
		{"completion", func(t *testing.T, r string) { write(t, r, "/usr/share/zsh/vendor-completions/_corral", "") }, nil, nil,
			[]Finding{{Check: "files", Name: "/usr/share/zsh/vendor-completions/_corral", Owned: true}}},
		{"doc dir", func(t *testing.T, r string) { mkdir(t, r, "/usr/share/doc/corral") }, nil, nil,
			[]Finding{{Check: "files", Name: "/usr/share/doc/corral", Owned: true}}},
		{"listed file", func(t *testing.T, r string) { write(t, r, "/usr/lib/corral/helper", "") }, []string{"./usr/lib/corral/helper"}, nil,
			[]Finding{{Check: "files", Name: "/usr/lib/corral/helper", Owned: true}}},
		{"dpkg record", func(t *testing.T, r string) { write(t, r, "/var/lib/dpkg/info/corral.postrm", "") }, nil, nil,
			[]Finding{{Check: "dpkg", Name: "/var/lib/dpkg/info/corral.postrm", Owned: true}}},
		{"state dir", func(t *testing.T, r string) { mkdir(t, r, "/var/lib/corral") }, nil, nil,
			[]Finding{{Check: "state", Name: "/var/lib/corral", Owned: true}}},
		{"runtime", func(t *testing.T, r string) { write(t, r, "/run/corral/gateway.sock", "") }, nil, nil,
			[]Finding{{Check: "runtime", Name: "/run/corral"}, {Check: "runtime", Name: "/run/corral/gateway.sock"}}},
		{"runtime name", func(t *testing.T, r string) { mkdir(t, r, "/run/corral-cred-1") }, nil, nil,
			[]Finding{{Check: "runtime", Name: "/run/corral-cred-1"}}},
		{"package's unit, enabled", func(t *testing.T, r string) {
			write(t, r, "/etc/systemd/system/corral-service-claw.service", "[Service]\nExecStart=/usr/bin/corral service start claw\nPIDFile=/var/lib/corral/services/claw/supervisor.pid\n")
			symlink(t, r, "/etc/systemd/system/corral-service-claw.service", "/etc/systemd/system/multi-user.target.wants/corral-service-claw.service")
		}, nil, nil, []Finding{
			{Check: "units", Name: "/etc/systemd/system/corral-service-claw.service", Owned: true},
			{Check: "units", Name: "/etc/systemd/system/multi-user.target.wants/corral-service-claw.service", Owned: true}}},
		{"another corral's unit", func(t *testing.T, r string) {
			write(t, r, "/etc/systemd/system/corral-service-t.service", "[Service]\nExecStart=/tmp/x/corral service start t\nPIDFile=/tmp/y/t/supervisor.pid\n")
		}, nil, nil, []Finding{{Check: "units", Name: "/etc/systemd/system/corral-service-t.service"}}},
		{"agent user and group", func(t *testing.T, r string) {
			appendTo(t, r, "/etc/passwd", "corral-claw:x:998:998:corral service claw:/var/lib/corral/services/claw/home:/usr/sbin/nologin\n")
			appendTo(t, r, "/etc/group", "corral-claw:x:998:\n")
		}, nil, nil, []Finding{{Check: "users", Name: "corral-claw", Owned: true}, {Check: "groups", Name: "corral-claw", Owned: true}}},
		{"agent user of another base", func(t *testing.T, r string) {
			appendTo(t, r, "/etc/passwd", "corral-t:x:997:997:corral service t:/tmp/b/t/home:/usr/sbin/nologin\n")
		}, nil, nil, []Finding{{Check: "users", Name: "corral-t"}}},
		{"corral-named user and group", func(t *testing.T, r string) {
			appendTo(t, r, "/etc/passwd", "corral-test:x:1001:1001::/home/corral-test:/bin/sh\n")
			appendTo(t, r, "/etc/group", "corral-test:x:1001:\n")
		}, nil, nil, []Finding{{Check: "users", Name: "corral-test"}, {Check: "groups", Name: "corral-test"}}},
		{"supervisor on the old binary", func(t *testing.T, r string) {
			write(t, r, "/proc/77/cmdline", "/usr/bin/corral\x00__service-supervise\x00/var/lib/corral/services/claw\x00")
			symlink(t, r, "/usr/bin/corral (deleted)", "/proc/77/exe")
		}, nil, nil, []Finding{{Check: "processes", Name: "77", Owned: true}}},
		{"process of the binary", func(t *testing.T, r string) {
			write(t, r, "/proc/78/cmdline", "corral\x00gateway\x00serve\x00")
			symlink(t, r, "/usr/bin/corral", "/proc/78/exe")
			write(t, r, "/usr/bin/corral", "")
		}, nil, nil, []Finding{{Check: "processes", Name: "78", Owned: true}, {Check: "files", Name: "/usr/bin/corral", Owned: true}}},
		{"cgroup parent and group", func(t *testing.T, r string) {
			mkdir(t, r, "/sys/fs/cgroup/memory/process_api/abc/corral/run-12-x")
			mkdir(t, r, "/sys/fs/cgroup/user.slice/corral-supervisor")
		}, nil, nil, []Finding{
			{Check: "cgroups", Name: "/sys/fs/cgroup/memory/process_api/abc/corral"},
			{Check: "cgroups", Name: "/sys/fs/cgroup/memory/process_api/abc/corral/run-12-x"},
			{Check: "cgroups", Name: "/sys/fs/cgroup/user.slice/corral-supervisor"}}},
		{"tmp names", func(t *testing.T, r string) {
			mkdir(t, r, "/tmp/corral-1000/docker")
			write(t, r, "/tmp/corral-default-123.yaml", "")
			mkdir(t, r, "/var/tmp/corral-qualify-9")
		}, nil, nil, []Finding{
			{Check: "tmp", Name: "/tmp/corral-1000"}, {Check: "tmp", Name: "/tmp/corral-default-123.yaml"}, {Check: "tmp", Name: "/var/tmp/corral-qualify-9"}}},
		{"docker container and volume", nil, nil, func(context.Context) ([]Container, []Volume, error) {
			return []Container{{ID: "c2", Names: []string{"/corral-abc"}, State: "exited", Labels: map[string]string{"io.corral.sandbox": "corral-abc"}}},
				[]Volume{{Name: "v1", Labels: map[string]string{"io.corral.state-dir": "/x"}}, {Name: "v2"}}, nil
		}, []Finding{{Check: "docker", Name: "container corral-abc"}, {Check: "docker", Name: "volume v1"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			plantClean(t, root)
			if c.plant != nil {
				c.plant(t, root)
			}
			d := c.docker
			if d == nil {
				d = docker()
			}
			var got []Finding
			for _, f := range Findings(Scan(context.Background(), Options{Root: root, Files: c.files, Docker: d})) {
				if f.Detail == "" {
					t.Errorf("%s: no detail", f.Key())
				}
				f.Detail = ""
				got = append(got, f)
			}
			slices.SortFunc(got, func(a, b Finding) int { return strings.Compare(a.Key(), b.Key()) })
			want := slices.Clone(c.want)
			slices.SortFunc(want, func(a, b Finding) int { return strings.Compare(a.Key(), b.Key()) })
			if !slices.Equal(got, want) {
				t.Errorf("found %+v\nwant  %+v", got, want)
			}
		})
	}
}

func TestDockerUnreachable(t *testing.T) {
	checks := Scan(context.Background(), Options{Root: t.TempDir(), Docker: func(context.Context) ([]Container, []Volume, error) {
		return nil, nil, errors.New("no socket")
	}})
	for _, c := range checks {
		if c.Name == "docker" && !strings.Contains(c.Skipped, "no socket") {
			t.Errorf("docker check: skipped %q", c.Skipped)
		}
	}
}

func TestDiff(t *testing.T) {
	shared := Finding{Check: "cgroups", Name: "/sys/fs/cgroup/pids/corral"}
	owned := Finding{Check: "state", Name: "/var/lib/corral", Owned: true}
	fresh := Finding{Check: "tmp", Name: "/tmp/corral-0"}
	got := Diff([]Finding{shared, owned}, []Finding{shared, owned, fresh})
	if !slices.Equal(got, []Finding{owned, fresh}) {
		t.Errorf("Diff = %+v, want the owned finding (there before too) and the new one", got)
	}
}

// DockerSocket asks the Engine API on a unix socket.
func TestDockerSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/containers/json":
			if r.URL.Query().Get("all") != "1" {
				t.Errorf("containers listed without all=1: %s", r.URL)
			}
			_ = json.NewEncoder(w).Encode([]Container{{ID: "c", Names: []string{"/corral-x"}, Labels: map[string]string{"io.corral.sandbox": "corral-x"}}})
		case "/volumes":
			_ = json.NewEncoder(w).Encode(map[string]any{"Volumes": []Volume{{Name: "v"}}})
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(l)
	defer srv.Close()
	cs, vs, err := DockerSocket(sock)(context.Background())
	if err != nil || len(cs) != 1 || cs[0].Labels["io.corral.sandbox"] != "corral-x" || len(vs) != 1 || vs[0].Name != "v" {
		t.Fatalf("DockerSocket: %+v %+v %v", cs, vs, err)
	}
	if _, _, err := DockerSocket(filepath.Join(t.TempDir(), "none"))(context.Background()); err == nil {
		t.Error("no daemon: no error")
	}
}

func docker(cs ...Container) Docker {
	return func(context.Context) ([]Container, []Volume, error) { return cs, nil, nil }
}

func write(t *testing.T, root, p, s string) {
	t.Helper()
	mkdir(t, root, filepath.Dir(p))
	if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, root, p, s string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, p), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, root, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, target, link string) {
	t.Helper()
	mkdir(t, root, filepath.Dir(link))
	if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
		t.Fatal(err)
	}
}
