package pgtest

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// noEngine points the docker command at a socket that does not exist, as on a machine with a
// docker client and no engine.
func noEngine(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-docker.sock"))
	t.Setenv("DOCKER_CONTEXT", "")
}

// TestDockerStepsAsideWithoutEngine: with no engine, the container step returns errNoEngine
// and starts nothing; with no docker command at all, too.
func TestDockerStepsAsideWithoutEngine(t *testing.T) {
	t.Run("no engine", func(t *testing.T) {
		noEngine(t)
		c, err := startContainer() // "docker version" is bounded by dockerProbeTimeout
		if c != nil || !errors.Is(err, errNoEngine) {
			t.Fatalf("startContainer() = %v, %v; want errNoEngine", c, err)
		}
		t.Log(err)
	})
	t.Run("no docker command", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		c, err := startContainer()
		if c != nil || !errors.Is(err, errNoEngine) || !strings.Contains(err.Error(), "no docker command") {
			t.Fatalf("startContainer() = %v, %v; want errNoEngine naming the missing command", c, err)
		}
	})
}

// TestLookupEndsWithDocker hides every earlier step: Lookup tries the container last and, with no
// engine, reports "no server" (a skip, unless GATED_TEST_REQUIRE_DB=1) naming every step.
func TestLookupEndsWithDocker(t *testing.T) {
	Cleanup()
	defer Cleanup()
	t.Setenv(EnvURL, "")
	noEngine(t)
	savedURL, savedStep := localURL, clusterStep
	defer func() { localURL, clusterStep = savedURL, savedStep }()
	closed, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	localURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", closed)
	clusterStep = func() (*Cluster, error) { return nil, fmt.Errorf("%w: hidden by the test", errNoBinaries) }

	u, err := Lookup()
	if err == nil || !errors.Is(err, errNoServer) {
		t.Fatalf("Lookup() = %q, %v; want errNoServer", u, err)
	}
	for _, step := range []string{localURL, "private cluster: ", "docker: no Docker engine"} {
		if !strings.Contains(err.Error(), step) {
			t.Errorf("error %q does not name the step %q", err, step)
		}
	}
	if docked != nil || shared != nil {
		t.Error("a failed Lookup left a server behind")
	}
}
