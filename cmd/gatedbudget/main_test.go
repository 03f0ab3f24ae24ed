package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// runCmd runs the command in-process with DATABASE_URL unset.
func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
	return code, out.String(), errOut.String()
}

// withParams adds query parameters to a postgres:// URL.
func withParams(base, params string) string {
	if strings.Contains(base, "?") {
		return base + "&" + params
	}
	return base + "?" + params
}

// serverSettings reads the three settings with pgx, independently of the command.
func serverSettings(t *testing.T, url string) (maxConns, superuser int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int`).Scan(&maxConns, &superuser); err != nil {
		t.Fatal(err)
	}
	return maxConns, superuser
}

// TestBudgetOnPrivateClusterAtTheBoundary: max_connections=20 with 4 reserved for superusers
// leaves 16: (2 instances + 1 surge) × P 4 + other 4 = 16 fits exactly and other 5 does not, so
// the reserved connections are counted (without them 20 would be available). P is summed over
// several DSNs.
func TestBudgetOnPrivateClusterAtTheBoundary(t *testing.T) {
	c := pgtest.NewCluster(t, "max_connections=20", "superuser_reserved_connections=4")
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"fits exactly", []string{"-dsn", withParams(c.URL(), "gate_max_conns=4"), "-instances", "2", "-surge", "1", "-other", "4"}, 0, []string{
			"available: max_connections 20 − superuser_reserved_connections 4 − reserved_connections 0 = 16",
			"needed:    (instances 2 + surge 1) × P 4 + other 4 = 16",
			"headroom:  16 − 16 = 0: fits",
			"largest P per instance that fits: 4",
		}},
		{"one over by other", []string{"-dsn", withParams(c.URL(), "gate_max_conns=4"), "-instances", "2", "-surge", "1", "-other", "5"}, 1, []string{
			"= 17", "headroom:  16 − 17 = -1: does NOT fit", "largest P per instance that fits: 3",
		}},
		{"fits exactly with P summed over two DSNs", []string{
			"-dsn", withParams(c.URL(), "gate_max_conns=3"), "-dsn", withParams(c.URL(), "gate_max_conns=2"),
			"-instances", "2", "-surge", "1", "-other", "1",
		}, 0, []string{"P per instance: 3 + 2 = 5 (gate_max_conns of 2 DSNs, 2 pools)", "× P 5 + other 1 = 16", "16 − 16 = 0: fits"}},
		{"one over with P summed over two DSNs", []string{
			"-dsn", withParams(c.URL(), "gate_max_conns=3"), "-dsn", withParams(c.URL(), "gate_max_conns=2"),
			"-instances", "2", "-surge", "1", "-other", "2",
		}, 1, []string{"× P 5 + other 2 = 17", "16 − 17 = -1: does NOT fit", "largest P per instance that fits: 4"}},
		{"a pool shared by gate_name counts once", []string{
			"-dsn", withParams(c.URL(), "gate_name=shop&gate_max_conns=4"), "-dsn", withParams(c.URL(), "gate_name=shop&gate_max_conns=4"),
			"-instances", "2", "-surge", "1", "-other", "4",
		}, 0, []string{"P per instance: 4 (gate_name shop, shared by 2 DSNs) = 4 (gate_max_conns of 2 DSNs, 1 pool)", "× P 4 + other 4 = 16", "16 − 16 = 0: fits"}},
		{"P one above the largest that fits", []string{
			"-dsn", withParams(c.URL(), "gate_max_conns=3"), "-dsn", withParams(c.URL(), "gate_max_conns=3"),
			"-instances", "2", "-surge", "1", "-other", "1",
		}, 1, []string{"× P 6 + other 1 = 19", "does NOT fit", "largest P per instance that fits: 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, tc.args...)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr: %s", code, tc.wantCode, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestBudgetOnLocalServerAtTheBoundary uses the shared server (max_connections 100 here) with
// the default P of 10: other = available − 10 fits, one more does not.
func TestBudgetOnLocalServerAtTheBoundary(t *testing.T) {
	url := pgtest.URL(t)
	maxConns, superuser := serverSettings(t, url)
	available := maxConns - superuser // PostgreSQL 15: no reserved_connections
	t.Logf("server: max_connections %d, superuser_reserved_connections %d", maxConns, superuser)
	for _, tc := range []struct {
		other    int
		wantCode int
		verdict  string
	}{
		{available - 10, 0, "= 0: fits"},
		{available - 9, 1, "= -1: does NOT fit"},
	} {
		code, out, errOut := runCmd(t, "-dsn", url, "-other", fmt.Sprint(tc.other))
		if code != tc.wantCode || !strings.Contains(out, tc.verdict) {
			t.Errorf("-other %d: exit %d, want %d with %q; stdout:\n%s\nstderr: %s", tc.other, code, tc.wantCode, tc.verdict, out, errOut)
		}
		head := fmt.Sprintf("available: max_connections %d − superuser_reserved_connections %d − reserved_connections 0 = %d", maxConns, superuser, available)
		if !strings.Contains(out, head) {
			t.Errorf("output lacks %q:\n%s", head, out)
		}
	}
}

// TestLiveShowsTheTestsOwnBackends holds three idle connections under an application_name of
// its own and finds them in -live's table.
func TestLiveShowsTheTestsOwnBackends(t *testing.T) {
	url := pgtest.URL(t)
	name := fmt.Sprintf("gatedbudget_test_%d_%d", os.Getpid(), time.Now().UnixNano())
	ctx := context.Background()
	for range 3 {
		conn, err := pgx.Connect(ctx, withParams(url, "application_name="+name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
	}
	code, out, errOut := runCmd(t, "-dsn", url, "-live")
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errOut)
	}
	row := regexp.MustCompile(`(?m)^\s+` + name + `\s+idle\s+3$`)
	if !row.MatchString(out) {
		t.Errorf("no row %q idle 3 in:\n%s", name, out)
	}
	if !regexp.MustCompile(`(?m)^\s+total\s+\d+ of \d+ available$`).MatchString(out) {
		t.Errorf("no total row in:\n%s", out)
	}
}

// TestLiveListsTheFleetWithoutJoiningIt runs one instance with gate_fleet=on and finds it in
// -live's fleet table holding the whole total (6 working connections and B 6, the default for
// that P; its lease connection is one more, outside the total);
// the command, given the same DSN, does not join.
func TestLiveListsTheFleetWithoutJoiningIt(t *testing.T) {
	url := pgtest.URL(t)
	name := fmt.Sprintf("gatedbudget_fleet_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	dsn := withParams(url, "gate_fleet=on&gate_name="+name+"&gate_fleet_table="+name+"&gate_max_conns=6&gate_fleet_ttl=3s&gate_fleet_refresh=1s")
	adm, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, drop := range []string{"FUNCTION IF EXISTS " + name + "_refresh", "FUNCTION IF EXISTS " + name + "_live", "TABLE IF EXISTS " + name} {
			adm.Exec("DROP " + drop)
		}
		adm.Close()
	})
	db, err := gated.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, _ := gated.FromDB(db)
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Fleet.Conns != 6 {
		if time.Now().After(deadline) {
			t.Fatalf("the instance never held the fleet's 6 connections: %+v", c.Stats().Fleet)
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, out, errOut := runCmd(t, "-dsn", dsn, "-live")
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, errOut)
	}
	if !strings.Contains(out, "fleet "+name) || !regexp.MustCompile(`(?m)^\s+\d+\s+.*pid \d+\s+true\s+\S+\s+6\s+\[6\]\s+\[6\]$`).MatchString(out) {
		t.Errorf("no fleet table with the instance holding 6 connections in:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^\s+1 live\s+6 of 6`).MatchString(out) {
		t.Errorf("the fleet has more than the one instance (did the command join it?):\n%s", out)
	}
}

// freePort returns a port on 127.0.0.1 that nothing listens on (it was free a moment ago).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestFailuresExitTwoWithoutThePassword(t *testing.T) {
	const secret = "s3cr3t-Pw"
	port := freePort(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad gate key", []string{"-dsn", "postgres://app:" + secret + "@127.0.0.1:5432/db?gate_max_conns=zero"}, "gate_max_conns"},
		{"malformed URL", []string{"-dsn", "postgres://app:" + secret + "@127.0.0.1:notaport/db"}, "gatedbudget: "},
		{"unreachable server", []string{"-dsn", fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/db?sslmode=disable&connect_timeout=5", secret, port)}, "127.0.0.1"},
		{"unreachable, keyword form", []string{"-dsn", fmt.Sprintf("host=127.0.0.1 port=%d user=app password=%s sslmode=disable", port, secret)}, "127.0.0.1"},
		{"no DSN", nil, "DATABASE_URL"},
		{"no instances", []string{"-dsn", "postgres://app:" + secret + "@127.0.0.1:5432/db", "-instances", "0"}, "instances"},
		{"two servers", []string{"-dsn", "postgres://app:" + secret + "@127.0.0.1:5432/db", "-dsn", fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/db", secret, port)}, "different servers"},
		{"stray argument", []string{"-dsn", "postgres://127.0.0.1/db", "extra"}, "unexpected arguments"},
		{"unknown flag", []string{"-pool", "3"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stdout %q stderr %q", code, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q lacks %q", errOut, tc.want)
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("output contains the password: %q", out+errOut)
			}
			t.Logf("stderr: %s", strings.TrimSpace(errOut))
		})
	}
}

func TestDatabaseURLIsTheDefaultDSN(t *testing.T) {
	url := pgtest.URL(t)
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return withParams(url, "gate_max_conns=1")
		}
		return ""
	}
	code := run(context.Background(), []string{"-other", "0"}, getenv, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "× P 1 + other 0 = 1") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s", code, out.String(), errOut.String())
	}
}
