package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The last discovery step: a throwaway PostgreSQL container, for a laptop with a Docker engine
// and no local PostgreSQL. It drives the docker command (os/exec) rather than a Docker client
// library, so that it adds no module to go.mod: github.com/ory/dockertest/v3 would bring a large
// tree (the Docker API types, containerd, OpenContainers, logrus, ...) into every download of
// the root module's test dependencies. Without a docker command or an engine it steps aside
// within dockerProbeTimeout.

const (
	// dockerImage is the server the tests are written for (see the package doc).
	dockerImage = "postgres:15"
	// dockerProbeTimeout bounds "docker version": how long an absent engine can delay discovery.
	dockerProbeTimeout = 10 * time.Second
	// dockerRunTimeout bounds "docker run", which may pull the image.
	dockerRunTimeout = 5 * time.Minute
	// dockerReadyTimeout bounds waiting for the container's server to answer SELECT 1.
	dockerReadyTimeout = 60 * time.Second
)

// errNoEngine marks a machine where the step cannot start anything: no docker command, or no
// engine answers it.
var errNoEngine = errors.New("no Docker engine")

// A container is a running throwaway PostgreSQL container.
type container struct {
	id, url string
	watchW  *os.File  // closing it makes the watchdog remove the container
	watch   *exec.Cmd // the watchdog
}

// docker runs the docker command with args, bounded by timeout, and returns its trimmed output.
func docker(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		return "", fmt.Errorf("docker %s: %v: %s", args[0], err, msg)
	}
	return strings.TrimSpace(string(out)), nil
}

// startContainer starts dockerImage with trust authentication, published on a free port of
// 127.0.0.1, and waits until it answers. Without a docker command or an engine it returns
// errNoEngine at once (after dockerProbeTimeout at most).
func startContainer() (_ *container, err error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, fmt.Errorf("%w: no docker command", errNoEngine)
	}
	if _, err := docker(dockerProbeTimeout, "version", "--format", "{{.Server.Version}}"); err != nil {
		return nil, fmt.Errorf("%w: %v", errNoEngine, err)
	}
	id, err := docker(dockerRunTimeout, "run", "--detach", "--rm", "--label", "gated-pgtest=1",
		"--env", "POSTGRES_HOST_AUTH_METHOD=trust", "--publish", "127.0.0.1::5432", dockerImage,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c := &container{id: id}
	if err := c.startWatchdog(); err != nil {
		docker(time.Minute, "rm", "--force", id)
		return nil, err
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	addr, err := docker(dockerProbeTimeout, "port", id, "5432/tcp")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	addr, _, _ = strings.Cut(addr, "\n") // one line per address family
	c.url = fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr)
	if err := waitReady(c.url, dockerReadyTimeout); err != nil {
		return nil, fmt.Errorf("pgtest: container %.12s: %w", id, err)
	}
	return c, nil
}

// containerWatchdog waits for EOF on stdin, which comes when the process that started it exits
// in any way, then removes the container. Arguments: the container's id.
const containerWatchdog = `trap '' HUP INT TERM QUIT
cat >/dev/null
docker rm --force "$1" >/dev/null 2>&1
`

func (c *container) startWatchdog() error {
	var err error
	c.watch, c.watchW, err = startWatchdog("-c", containerWatchdog, "gated-pgtest-docker-watchdog", c.id)
	return err
}

// close removes the container (through the watchdog) and waits until it is gone.
func (c *container) close() error {
	c.watchW.Close()
	if err := c.watch.Wait(); err != nil {
		return fmt.Errorf("pgtest: docker watchdog: %w", err)
	}
	if out, err := docker(dockerProbeTimeout, "ps", "--all", "--quiet", "--filter", "id="+c.id); err == nil && out != "" {
		return fmt.Errorf("pgtest: container %.12s still exists after docker rm", c.id)
	}
	return nil
}
