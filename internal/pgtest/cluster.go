package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// errNoBinaries marks a machine where a private cluster cannot be made at all (no PostgreSQL
// binaries, or no user to run them as): NewCluster skips then, unless GATED_TEST_REQUIRE_DB=1.
var errNoBinaries = errors.New("no usable PostgreSQL binaries")

const (
	cmdTimeout   = 2 * time.Minute  // bound on one initdb or pg_ctl run
	readyTimeout = 30 * time.Second // bound on waiting for a started server to answer SELECT 1
	logTailBytes = 4096             // how much of the server log a failure shows
)

// Cluster is a private PostgreSQL cluster the test controls: it can be stopped, started and
// restarted, and made with settings such as "max_connections=5". It listens on 127.0.0.1 on a port
// chosen free, trusts every local connection, and keeps its files in /tmp/gated-pgtest-*.
// Its methods are safe for concurrent use.
type Cluster struct {
	initdb, pgctl string   // binaries
	runAs         []string // command prefix that runs a binary as the server's user, or nil
	base          string   // /tmp/gated-pgtest-*: data/, postgres.log
	data, logFile string
	port          int

	mu      sync.Mutex
	running bool
	closed  bool
	watchW  *os.File  // write end of the watchdog's stdin; closing it tells the watchdog to clean up
	watch   *exec.Cmd // the watchdog process
}

// NewCluster makes a private cluster with initdb, applies settings (lines of postgresql.conf such
// as "max_connections=5" or "log_statement='all'"), starts it and waits until it accepts
// connections. t.Cleanup stops and removes it. Without PostgreSQL binaries the test is skipped
// with a message naming GATED_TEST_DATABASE_URL, or failed when GATED_TEST_REQUIRE_DB=1.
func NewCluster(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	c, err := newCluster(settings)
	if err != nil {
		if errors.Is(err, errNoBinaries) && !required() {
			t.Skipf("pgtest: %v (a private cluster needs initdb and pg_ctl; %s does not help this test)", err, EnvURL)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// URL returns postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port returns the TCP port the cluster listens on (the same across restarts).
func (c *Cluster) Port() int { return c.port }

// Stop stops the server with pg_ctl stop -m fast and waits until it has exited.
// Stopping a stopped cluster does nothing.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopLocked(); err != nil {
		t.Fatal(err)
	}
}

// Start starts the server with pg_ctl start and waits until it accepts connections.
// Starting a running cluster does nothing.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.startLocked(); err != nil {
		t.Fatal(err)
	}
}

// Restart stops the server (fast) and starts it again, on the same port.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopLocked(); err != nil {
		t.Fatal(err)
	}
	if err := c.startLocked(); err != nil {
		t.Fatal(err)
	}
}

func newCluster(settings []string) (_ *Cluster, err error) {
	for _, s := range settings {
		if !strings.Contains(s, "=") || strings.ContainsAny(s, "\r\n") {
			return nil, fmt.Errorf("pgtest: setting %q is not one name=value line", s)
		}
	}
	initdb, pgctl, err := findBinaries()
	if err != nil {
		return nil, err
	}
	c := &Cluster{initdb: initdb, pgctl: pgctl}

	tmp := os.TempDir()
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		// The server refuses to run as root: run it as postgres, in a directory it owns. Use /tmp
		// rather than $TMPDIR, which may be a directory that postgres cannot reach.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: running as root, and the server needs a user postgres to run as: %v", errNoBinaries, err)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			return nil, fmt.Errorf("%w: running as root, and runuser is missing: %v", errNoBinaries, err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		c.runAs = []string{runuser, "-u", "postgres", "--"}
		tmp = "/tmp"
	}
	if c.base, err = os.MkdirTemp(tmp, "gated-pgtest-*"); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if uid >= 0 {
		if err := os.Chown(c.base, uid, gid); err != nil {
			os.RemoveAll(c.base)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	c.data = filepath.Join(c.base, "data")
	c.logFile = filepath.Join(c.base, "postgres.log")
	if err := c.startWatchdog(); err != nil {
		os.RemoveAll(c.base)
		return nil, err
	}
	defer func() {
		if err != nil {
			c.close()
		}
	}()

	if out, err := c.run(c.initdb, "-D", c.data, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	conf := []string{
		"# added by gated/internal/pgtest",
		"listen_addresses = '127.0.0.1'",
		"unix_socket_directories = ''", // TCP only: no socket path length limits, nothing in /var/run
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
	}
	if err := c.appendConf(append(conf, settings...)...); err != nil {
		return nil, err
	}
	// A port found free may be taken before the server binds it: then try another.
	for attempt := 1; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = c.appendConf(fmt.Sprintf("port = %d", c.port)); err != nil {
			return nil, err
		}
		c.mu.Lock()
		err = c.startLocked()
		c.mu.Unlock()
		if err == nil {
			return c, nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "already in use") {
			return nil, err
		}
	}
}

// findBinaries returns initdb and pg_ctl of the highest version in /usr/lib/postgresql/*/bin
// (Debian's layout), else those on PATH.
func findBinaries() (initdb, pgctl string, err error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) []int {
		var v []int
		for _, f := range strings.Split(filepath.Base(filepath.Dir(dir)), ".") {
			n, _ := strconv.Atoi(f)
			v = append(v, n)
		}
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { // highest first
		a, b := version(dirs[i]), version(dirs[j])
		for k := 0; k < len(a) && k < len(b); k++ {
			if a[k] != b[k] {
				return a[k] > b[k]
			}
		}
		return len(a) > len(b)
	})
	for _, d := range dirs {
		initdb, pgctl = filepath.Join(d, "initdb"), filepath.Join(d, "pg_ctl")
		if isExecutable(initdb) && isExecutable(pgctl) && isExecutable(filepath.Join(d, "postgres")) {
			return initdb, pgctl, nil
		}
	}
	initdb, err1 := exec.LookPath("initdb")
	pgctl, err2 := exec.LookPath("pg_ctl")
	if err1 != nil || err2 != nil {
		return "", "", fmt.Errorf("%w: initdb and pg_ctl are in neither /usr/lib/postgresql/*/bin nor PATH", errNoBinaries)
	}
	return initdb, pgctl, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// command returns a command that runs bin as the server's user, in the cluster's directory.
func (c *Cluster) command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	argv := append(append(append([]string(nil), c.runAs...), bin), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.base // the test's working directory may be unreadable for the server's user
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs bin as the server's user and returns its combined output.
func (c *Cluster) run(bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	return c.command(ctx, bin, args...).CombinedOutput()
}

func (c *Cluster) appendConf(lines ...string) error {
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgtest: writing postgresql.conf: %w", err)
	}
	return nil
}

// startLocked starts the server and waits until it answers SELECT 1; c.mu is held.
func (c *Cluster) startLocked() error {
	if c.closed {
		return errors.New("pgtest: cluster already removed")
	}
	if c.running {
		return nil
	}
	off := fileSize(c.logFile)
	// -l sends the server's output to the log file, so it does not hold our pipe open.
	out, err := c.run(c.pgctl, "start", "-w", "-t", "60", "-D", c.data, "-l", c.logFile)
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl start: %v\n%s\nserver log:\n%s", err, out, c.logSince(off))
	}
	c.running = true
	if err := waitReady(c.URL(), readyTimeout); err != nil {
		return fmt.Errorf("pgtest: %v\nserver log:\n%s", err, c.logSince(off))
	}
	return nil
}

// stopLocked stops the server (fast shutdown) and waits until it has exited; c.mu is held.
func (c *Cluster) stopLocked() error {
	if !c.running {
		return nil
	}
	off := fileSize(c.logFile)
	out, err := c.run(c.pgctl, "stop", "-w", "-t", "60", "-m", "fast", "-D", c.data)
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %v\n%s\nserver log:\n%s", err, out, c.logSince(off))
	}
	c.running = false
	return nil
}

// watchdogScript waits for EOF on stdin, which comes when the process that started it closes the
// pipe or exits in any way (even by SIGKILL), then stops the server and removes the directory.
// It ignores the signals a terminal's Ctrl-C or hangup would send to the whole process group.
// Arguments: base directory, then the command that runs pg_ctl.
const watchdogScript = `trap '' HUP INT TERM QUIT
base=$1; shift
cat >/dev/null
if [ -f "$base/data/postmaster.pid" ]; then "$@" stop -w -t 30 -m immediate -D "$base/data" >/dev/null 2>&1; fi
rm -rf "$base"
`

func (c *Cluster) startWatchdog() error {
	args := append([]string{"-c", watchdogScript, "gated-pgtest-watchdog", c.base}, c.runAs...)
	var err error
	c.watch, c.watchW, err = startWatchdog(append(args, c.pgctl)...)
	return err
}

// startWatchdog starts /bin/sh with args, its standard input the read end of a pipe whose write
// end, returned, only this process holds: the script's read returns when this process closes
// it or exits, however it dies.
func startWatchdog(args ...string) (*exec.Cmd, *os.File, error) {
	r, w, err := os.Pipe() // close-on-exec: no other child inherits w
	if err != nil {
		return nil, nil, fmt.Errorf("pgtest: %w", err)
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdin = r // stdout and stderr are /dev/null: it must not hold a test's output open
	cmd.Dir = "/"
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("pgtest: starting watchdog: %w", err)
	}
	return cmd, w, nil
}

// close stops the server, lets the watchdog remove the directory and waits for it.
func (c *Cluster) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	var errs []error
	if err := c.stopLocked(); err != nil {
		errs = append(errs, err)
	}
	c.closed = true
	c.watchW.Close()
	if err := c.watch.Wait(); err != nil {
		errs = append(errs, fmt.Errorf("pgtest: watchdog: %w", err))
	}
	if err := os.RemoveAll(c.base); err != nil {
		errs = append(errs, fmt.Errorf("pgtest: %w", err))
	}
	return errors.Join(errs...)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns what the server log got after offset off, at most its last logTailBytes.
func (c *Cluster) logSince(off int64) string {
	f, err := os.Open(c.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if size := fileSize(c.logFile); size-off > logTailBytes {
		off = size - logTailBytes
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Sprintf("(log: %v)", err)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
