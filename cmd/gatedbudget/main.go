// Command gatedbudget checks a fleet's PostgreSQL connection budget:
//
//	(instances + surge) × P + other ≤ max_connections − superuser_reserved_connections − reserved_connections
//
// With gate_fleet=on a DSN's gate_max_conns is its fleet's total of working connections, counted
// once, and each instance holds one lease connection more, outside it:
//
//	(instances + surge) × P + fleet totals + (instances + surge) + other ≤ …
//
// with P the pools without gate_fleet=on.
//
// It reads the three settings from the server, takes P from the application's gated DSNs (the sum
// of their pools' gate_max_conns: DSNs with the same gate_name share one pool, counted once) and
// the rest from flags, prints the formula with the numbers, the
// headroom and the largest P per instance that fits, and exits 0 when the plan fits, 1 when it
// does not, and 2 on a usage or connection error. Messages never contain a password.
//
//	gatedbudget -dsn "$DATABASE_URL" -instances 12 -surge 3 -other 10
//	gatedbudget -dsn "$ORDERS_DSN" -dsn "$REPORTS_DSN" -instances 12 -live
//
// Flags:
//
//	-dsn        a gated DSN of the application (repeatable, one per gated *sql.DB of an
//	            instance; default $DATABASE_URL). P is the sum of their gate_max_conns, a pool
//	            shared by DSNs of one gate_name counted once; the first is used to connect, and
//	            all must name the same server.
//	-instances  peak instances: the autoscaling maximum (default 1)
//	-surge      extra instances during a rolling deploy (default 0)
//	-other      connections of everything else: admin, migrations, jobs, monitoring (default 0)
//	-live       also list the server's client backends now, by application_name and state,
//	            and for a DSN with gate_fleet=on its fleet's members and their shares (the
//	            command itself never joins the fleet)
//	-timeout    bound on connecting and querying (default 10s)
//
// -dsn is repeated rather than comma-separated because a PostgreSQL URL may itself hold commas
// (postgres://h1,h2/db lists several hosts).
//
// Behind PgBouncer or another pooler, the server counts the pooler's connections, not the
// application's: check the pooler's pool sizes instead (see package gatedbudget).
package main

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/gatedbudget"
	"github.com/gatedsql/gated/internal/dsn"
	"github.com/gatedsql/gated/internal/fleet"
	"github.com/jackc/pgx/v5/pgconn"
)

// Exit codes.
const (
	exitFits    = 0
	exitNoFit   = 1
	exitFailure = 2
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the command, with its environment passed in so that tests can run it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gatedbudget", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dsns []string
	fs.Func("dsn", "a gated DSN of the application (repeatable; default $DATABASE_URL)", func(s string) error {
		dsns = append(dsns, s)
		return nil
	})
	instances := fs.Int("instances", 1, "peak instances (the autoscaling maximum)")
	surge := fs.Int("surge", 0, "extra instances during a rolling deploy")
	other := fs.Int("other", 0, "connections of everything else (admin, migrations, jobs, monitoring)")
	live := fs.Bool("live", false, "also list the server's client backends by application_name and state")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on connecting and querying")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitFits
		}
		return exitFailure
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintln(stderr, "gatedbudget: "+scrub(fmt.Sprintf(format, a...), dsns))
		return exitFailure
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q (flags only)", fs.Args())
	}
	if len(dsns) == 0 {
		u := getenv("DATABASE_URL")
		if u == "" {
			return fail("no -dsn given and DATABASE_URL is empty")
		}
		dsns = []string{u}
	}
	p, err := gatedbudget.PerInstance(dsns...)
	if err != nil {
		return fail("%v", err)
	}
	fleetConns, err := gatedbudget.FleetConns(dsns...)
	if err != nil {
		return fail("%v", err)
	}
	plan := gatedbudget.Plan{Instances: *instances, Surge: *surge, Other: *other, PerInstance: p, FleetConns: fleetConns}
	if _, err := gatedbudget.Evaluate(gatedbudget.Settings{}, plan); err != nil {
		return fail("%v", err)
	}
	if err := sameServer(dsns); err != nil {
		return fail("%v", err)
	}

	db, err := openObserver(dsns[0])
	if err != nil {
		return fail("%v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	report, err := gatedbudget.Check(ctx, db, plan)
	if err != nil {
		return fail("%v", err)
	}
	if len(dsns) > 1 {
		pools, _ := gatedbudget.Pools(dsns...) // PerInstance succeeded with the same DSNs
		parts := make([]string, len(pools))
		for i, pl := range pools {
			parts[i] = fmt.Sprint(pl.MaxConns)
			if pl.DSNs > 1 {
				parts[i] += fmt.Sprintf(" (gate_name %s, shared by %d DSNs)", pl.Name, pl.DSNs)
			}
		}
		plural := "s"
		if len(pools) == 1 {
			plural = ""
		}
		fmt.Fprintf(stdout, "P per instance: %s = %d (gate_max_conns of %d DSNs, %d pool%s)\n", strings.Join(parts, " + "), p, len(dsns), len(pools), plural)
	}
	fmt.Fprint(stdout, report)
	if *live {
		groups, err := gatedbudget.Live(ctx, db)
		if err != nil {
			return fail("%v", err)
		}
		printLive(stdout, groups, report.Available)
		if err := printFleets(ctx, stdout, db, dsns); err != nil {
			return fail("%v", err)
		}
	}
	if !report.Fits {
		return exitNoFit
	}
	return exitFits
}

func printLive(w io.Writer, groups []gatedbudget.Backends, available int) {
	fmt.Fprintln(w, "\nclient backends now (pg_stat_activity; this command's own connection is one of them):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  application_name\tstate\tcount")
	total := 0
	for _, g := range groups {
		name, state := g.ApplicationName, g.State
		if name == "" {
			name = "(none)"
		}
		if state == "" {
			state = "(not visible)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\n", name, state, g.Count)
		total += g.Count
	}
	fmt.Fprintf(tw, "  total\t\t%d of %d available\n", total, available)
	tw.Flush()
}

// openObserver opens the first DSN for the command's own queries. A DSN with gate_fleet=on is
// opened without it, and without its gate_name: the command observes the fleet and must not join
// it, which would take a share from the instances, nor share gates with an instance in the same
// process.
func openObserver(dsn string) (*sql.DB, error) {
	cfg, err := gated.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Fleet {
		cfg.Fleet, cfg.Name = false, ""
	}
	c, err := gated.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return gated.OpenDB(c), nil
}

// printFleets lists, for each DSN with gate_fleet=on, its fleet's members and their declared
// shares from the fleet table. A fleet's gate_max_conns is the total of all its instances, not
// each one's: the formula above counts it once, plus one lease connection for each instance
// (gatedbudget.Plan.FleetConns, gatedbudget.Plan.FleetLeases).
func printFleets(ctx context.Context, w io.Writer, db *sql.DB, dsns []string) error {
	seen := map[string]bool{}
	for _, dsn := range dsns {
		cfg, err := gated.ParseDSN(dsn)
		if err != nil || !cfg.Fleet || seen[cfg.Name+"\x00"+cfg.FleetTable] {
			continue
		}
		seen[cfg.Name+"\x00"+cfg.FleetTable] = true
		if cfg.Name == "" {
			return fmt.Errorf("gate_fleet=on without a gate_name: no fleet to list")
		}
		table := cmp.Or(cfg.FleetTable, fleet.DefaultTable)
		members, err := fleet.Read(ctx, db, cfg.Name, table)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nfleet %s (gate_fleet=on: gate_max_conns %d is the total of all its instances, each holding a share):\n", cfg.Name, cfg.MaxConns)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  member\tinstance\tlive\tlease left\tconns\tconcurrent\tqueue")
		live, conns := 0, 0
		for _, m := range members {
			fmt.Fprintf(tw, "  %d\t%s\t%v\t%v\t%d\t%v\t%v\n", m.ID, m.Info, m.Live, m.LeaseLeft.Round(100*time.Millisecond), m.Conns, m.Concurrent, m.Queue)
			if m.Live {
				live++
				conns += m.Conns
			}
		}
		fmt.Fprintf(tw, "  %d live\t\t\t\t%d of %d\t\t\n", live, conns, cfg.MaxConns)
		tw.Flush()
	}
	return nil
}

// sameServer checks that PostgreSQL DSNs name one server: max_connections is per server, so P is
// summed only over DSNs of the same one. DSNs it cannot read are left to the connection.
func sameServer(dsns []string) error {
	first := ""
	for _, dsn := range dsns {
		cfg, err := gated.ParseDSN(dsn)
		if err != nil {
			return err
		}
		if cfg.Driver != "pgx" && cfg.Driver != "postgres" {
			continue
		}
		pc, err := pgconn.ParseConfig(cfg.DSN)
		if err != nil {
			continue
		}
		server := fmt.Sprintf("%s:%d", pc.Host, pc.Port)
		switch {
		case first == "":
			first = server
		case server != first:
			return fmt.Errorf("the DSNs name different servers (%s and %s); check each server on its own", first, server)
		}
	}
	return nil
}

// scrub removes the DSNs' passwords from msg, with gated's redactor: gated's errors never contain
// one; this also covers errors of the inner driver and of the network. A password that pgconn
// takes from the environment or a password file rather than the DSN goes too.
func scrub(msg string, dsns []string) string {
	for _, d := range dsns {
		msg = dsn.Redact(msg, d)
		if cfg, err := gated.ParseDSN(d); err == nil {
			if pc, err := pgconn.ParseConfig(cfg.DSN); err == nil && pc.Password != "" {
				u := url.URL{Scheme: "postgres", User: url.UserPassword("", pc.Password), Host: "h"}
				msg = dsn.Redact(msg, u.String())
			}
		}
	}
	return msg
}
