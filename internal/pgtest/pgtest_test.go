package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

func pingT(t *testing.T, url string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return ping(ctx, url)
}

func show(t *testing.T, url, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn(conn)
	var v string
	if err := conn.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// gone reports whether the directory is removed and nothing listens on the port, polling until
// both hold or 30s pass.
func gone(dir string, port int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, statErr := os.Stat(dir)
		conn, dialErr := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if dialErr == nil {
			conn.Close()
		}
		if errors.Is(statErr, os.ErrNotExist) && dialErr != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 30s: stat %s: %v; dial port %d: %v", dir, statErr, port, dialErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestURL(t *testing.T) {
	u := URL(t)
	if err := pingT(t, u); err != nil {
		t.Fatalf("SELECT 1 on %s: %v", u, err)
	}
	if got := show(t, u, "is_superuser"); got != "on" {
		t.Errorf("is_superuser = %q, want on", got)
	}
	if u2, err := Lookup(); err != nil || u2 != u {
		t.Errorf("Lookup() = %q, %v; want the cached %q", u2, err, u)
	}
	t.Logf("URL: %s", u)
}

func TestNewClusterSettingsAndRestart(t *testing.T) {
	c := NewCluster(t, "max_connections=7", "log_statement='all'")
	if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.Port()); c.URL() != want {
		t.Fatalf("URL() = %q, want %q", c.URL(), want)
	}
	if err := pingT(t, c.URL()); err != nil {
		t.Fatalf("SELECT 1: %v", err)
	}
	if got := show(t, c.URL(), "max_connections"); got != "7" {
		t.Errorf("max_connections = %q, want 7", got)
	}
	if got := show(t, c.URL(), "log_statement"); got != "all" {
		t.Errorf("log_statement = %q, want all", got)
	}
	if got := show(t, c.URL(), "fsync"); got != "off" {
		t.Errorf("fsync = %q, want off", got)
	}

	c.Stop(t)
	if err := pingT(t, c.URL()); err == nil {
		t.Fatal("SELECT 1 succeeded on a stopped cluster")
	}
	c.Stop(t) // stopping twice does nothing
	c.Start(t)
	if err := pingT(t, c.URL()); err != nil {
		t.Fatalf("SELECT 1 after Start: %v", err)
	}

	// A connection open across Restart breaks; a new one works, on the same port.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn(conn)
	port := c.Port()
	c.Restart(t)
	if c.Port() != port {
		t.Errorf("port changed across Restart: %d -> %d", port, c.Port())
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("a connection from before Restart still works")
	}
	if err := pingT(t, c.URL()); err != nil {
		t.Fatalf("SELECT 1 after Restart: %v", err)
	}
}

func TestClusterRemovedByCleanup(t *testing.T) {
	var dir string
	var port int
	t.Run("cluster", func(t *testing.T) {
		c := NewCluster(t)
		dir, port = c.base, c.Port()
		if _, err := os.Stat(dir); err != nil {
			t.Fatal(err)
		}
	})
	if dir == "" {
		t.Skip("no cluster was made")
	}
	if err := gone(dir, port); err != nil {
		t.Fatal(err)
	}
}

func TestBadSettings(t *testing.T) {
	if _, _, err := findBinaries(); err != nil {
		t.Skip(err)
	}
	if _, err := newCluster([]string{"max_connections"}); err == nil {
		t.Error("a setting without = was accepted")
	}
	// The server refuses to start: the error shows its log.
	_, err := newCluster([]string{"max_connections=lots"})
	if err == nil || !strings.Contains(err.Error(), "max_connections") {
		t.Errorf("err = %v, want one quoting the server log about max_connections", err)
	}
}

// TestLookupFallsBackToPrivateCluster hides the local server and GATED_TEST_DATABASE_URL, so
// that Lookup starts a private cluster, which Cleanup removes; then it points
// GATED_TEST_DATABASE_URL at a closed port, which fails instead of being skipped.
func TestLookupFallsBackToPrivateCluster(t *testing.T) {
	if _, _, err := findBinaries(); err != nil {
		t.Skip(err)
	}
	Cleanup()
	defer Cleanup()
	t.Setenv(EnvURL, "")
	saved := localURL
	defer func() { localURL = saved }()
	closed, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	localURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", closed)

	u, err := Lookup()
	if err != nil {
		t.Fatal(err)
	}
	if shared == nil || u != shared.URL() {
		t.Fatalf("Lookup() = %q, want a private cluster", u)
	}
	if err := pingT(t, u); err != nil {
		t.Fatal(err)
	}
	dir, port := shared.base, shared.Port()
	Cleanup()
	if err := gone(dir, port); err != nil {
		t.Fatal(err)
	}

	t.Setenv(EnvURL, localURL)
	_, err = Lookup()
	if err == nil || errors.Is(err, errNoServer) || !strings.Contains(err.Error(), EnvURL) {
		t.Errorf("Lookup() with %s at a closed port: err = %v, want a failure naming it", EnvURL, err)
	}
}

// TestKilledProcessLeavesNoServer starts a cluster in a child process, kills the child with
// SIGKILL and checks that the watchdog stops the server and removes its directory.
func TestKilledProcessLeavesNoServer(t *testing.T) {
	if os.Getenv("GATED_PGTEST_HELPER") == "1" {
		c, err := newCluster(nil)
		if err != nil {
			fmt.Printf("ERR %q\n", err)
			os.Exit(1)
		}
		fmt.Printf("READY %s %d\n", c.base, c.Port())
		time.Sleep(2 * time.Minute) // until killed
		os.Exit(1)
	}
	if _, _, err := findBinaries(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledProcessLeavesNoServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GATED_PGTEST_HELPER=1")
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	timer := time.AfterFunc(3*time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()

	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "READY" {
		t.Fatalf("helper said %q (%v)", line, err)
	}
	dir := f[1]
	port, _ := strconv.Atoi(f[2])
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := pingT(t, url); err != nil {
		t.Fatalf("helper's cluster: %v", err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := gone(dir, port); err != nil {
		t.Fatal(err)
	}
}
