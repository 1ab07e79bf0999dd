package scan

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DockerSocket is a Docker that asks the Engine API on the unix socket at
// sock (normally /var/run/docker.sock; Engine API v1.24 and later have
// GET /containers/json?all=1 and GET /volumes), 5 s at most a request.
func DockerSocket(sock string) Docker {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	get := func(ctx context.Context, p string, v any) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker"+p, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", p, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(v)
	}
	return func(ctx context.Context) ([]Container, []Volume, error) {
		var cs []Container
		if err := get(ctx, "/containers/json?all=1", &cs); err != nil {
			return nil, nil, err
		}
		var vs struct{ Volumes []Volume }
		if err := get(ctx, "/volumes", &vs); err != nil {
			return nil, nil, err
		}
		return cs, vs.Volumes, nil
	}
}
