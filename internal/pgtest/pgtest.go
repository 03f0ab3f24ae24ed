// Package pgtest finds or starts a PostgreSQL server for integration tests and benchmarks.
//
// [URL] and [Lookup] discover a server once per process, in this order:
//
//  1. the environment variable GATED_TEST_DATABASE_URL, used as given (it must answer SELECT 1);
//  2. a local server on 127.0.0.1:5432 as superuser postgres, trust auth (checked with a real
//     connection and SELECT 1, 2s timeout);
//  3. a private throwaway cluster ([Cluster]) when the PostgreSQL binaries are installed
//     (/usr/lib/postgresql/*/bin, highest version first, then PATH); it is stopped and removed
//     by [Cleanup];
//  4. a throwaway container of the image postgres:15 when a Docker engine answers (a laptop
//     without PostgreSQL), published on a free port of 127.0.0.1; it is removed by [Cleanup].
//     This step runs the docker command rather than a client library such as
//     github.com/ory/dockertest/v3, which would put a large tree of modules into the root
//     module's go.mod and into what a user's go mod tidy downloads. Without a docker command or
//     an engine (as on this project's machines) it steps aside within seconds.
//
// With no server found, URL skips the test with a message naming GATED_TEST_DATABASE_URL, or fails
// it when GATED_TEST_REQUIRE_DB=1.
//
// A private cluster or container never outlives the process that made it: a watchdog child process holds the
// read end of a pipe whose write end only this process holds; when this process exits, however it
// dies, the pipe closes and the watchdog stops the server (pg_ctl stop -m immediate) and removes
// its directory (/tmp/gated-pgtest-*), or removes the container (docker rm --force). Only a
// watchdog killed itself can leave a directory or container behind.
//
// Beside discovery, the package holds what the PostgreSQL tests of the root package and of the
// test module pgcontract share without gated's types (gated's own tests import this package, so
// it cannot import gated): the gated DSN of a test ([DSN]), a plain connection to the server
// ([Admin]), throwaway objects ([Table]), the server's view of a test's backends ([Backends]),
// ending a backend ([KillBackend]), and the check that every permit is back ([CheckQuiet]),
// which reads a connector through the small interface [Gates].
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// EnvURL names the variable that points the tests at a server of your choice.
	EnvURL = "GATED_TEST_DATABASE_URL"
	// EnvRequire names the variable that turns "no server found" from a skip into a failure.
	EnvRequire = "GATED_TEST_REQUIRE_DB"
)

// localURL is the local server tried second (a variable so that a test can hide it).
var localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	mu        sync.Mutex
	looked    bool
	cachedURL string
	cachedErr error
	shared    *Cluster   // the private cluster started by Lookup, if any
	docked    *container // the container started by Lookup, if any
)

// clusterStep is discovery step 3 (a variable so that a test can make it fail).
var clusterStep = func() (*Cluster, error) { return newCluster(nil) }

// errNoServer marks "nothing found" (skip unless required), as opposed to a server that was named
// in GATED_TEST_DATABASE_URL but does not answer (always a failure).
var errNoServer = errors.New("pgtest: no PostgreSQL server for tests")

// URL returns a base URL of a PostgreSQL server for tests, like
// "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", whose user is a superuser.
// The value of GATED_TEST_DATABASE_URL is returned as given. See the package doc for the
// discovery order. With no server found, URL calls t.Skip with a message naming
// GATED_TEST_DATABASE_URL, or t.Fatal when GATED_TEST_REQUIRE_DB=1.
func URL(t testing.TB) string {
	t.Helper()
	u, err := Lookup()
	if err != nil {
		if errors.Is(err, errNoServer) && !required() {
			t.Skipf("%v (set %s=postgres://... to run this test)", err, EnvURL)
		}
		t.Fatal(err)
	}
	return u
}

// Lookup is [URL] without a testing.TB, for programs such as cmd/gatedbench: it returns the URL
// or an error explaining what was tried. A program that gets a URL from Lookup should call
// [Cleanup] before it exits (a cluster left running is stopped anyway when the process exits).
func Lookup() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if !looked {
		cachedURL, cachedErr = discover()
		looked = true
	}
	return cachedURL, cachedErr
}

// Cleanup stops and removes a private cluster or container started by URL or Lookup. Call it from TestMain
// after m.Run; it is safe when none was started. A later URL or Lookup discovers again.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if shared != nil {
		if err := shared.close(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: cleanup: %v\n", err)
		}
		shared = nil
	}
	if docked != nil {
		if err := docked.close(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: cleanup: %v\n", err)
		}
		docked = nil
	}
	looked, cachedURL, cachedErr = false, "", nil
}

func required() bool {
	v, _ := strconv.ParseBool(os.Getenv(EnvRequire))
	return v
}

// discover runs the discovery steps; mu is held.
func discover() (string, error) {
	if u := os.Getenv(EnvURL); u != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ping(ctx, u); err != nil {
			return "", fmt.Errorf("pgtest: %s is set but its server does not answer SELECT 1: %w", EnvURL, err)
		}
		return u, nil
	}
	var tried []string
	if err := checkLocal(); err != nil {
		tried = append(tried, fmt.Sprintf("%s: %v", localURL, err))
	} else {
		return localURL, nil
	}
	c, err := clusterStep()
	if err == nil {
		shared = c
		return c.URL(), nil
	}
	tried = append(tried, fmt.Sprintf("private cluster: %v", err))
	d, err := startContainer()
	if err != nil {
		tried = append(tried, fmt.Sprintf("docker: %v", err))
		return "", fmt.Errorf("%w (%s not set; tried %s)", errNoServer, EnvURL, strings.Join(tried, "; "))
	}
	docked = d
	return d.url, nil
}

// checkLocal checks for a server on 127.0.0.1:5432 that lets postgres in as a superuser.
func checkLocal() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, localURL)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	var super bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return err
	}
	if !super {
		return errors.New("user postgres is not a superuser")
	}
	return nil
}

// ping connects to url and runs SELECT 1.
func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// waitReady polls url with ping until it answers or timeout passes.
func waitReady(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ping(ctx, url)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server not ready after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
