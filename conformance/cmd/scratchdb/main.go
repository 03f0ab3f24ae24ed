// Command scratchdb creates and drops the throwaway databases the conformance suites run in, so
// that their fixed table names (sqlx's person and place, pgx's t) neither meet other users' tables
// nor what a crashed run left behind.
//
//	eval "$(scratchdb create "$DSN")"
//
// creates a database named gated_conformance_<random> on DSN's server and prints shell
// assignments: SCRATCH_DB (its name), SCRATCH_DSN (DSN pointing at it) and the libpq variables
// PGHOST, PGPORT, PGUSER, PGDATABASE, PGSSLMODE (and PGPASSWORD when DSN has one) for it.
//
//	scratchdb drop "$DSN" NAME
//
// drops it, ending its sessions first; reset drops it and creates it again, empty.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

const prefix = "gated_conformance_"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scratchdb:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case len(args) == 2 && args[0] == "create":
		return create(ctx, args[1])
	case len(args) == 3 && (args[0] == "drop" || args[0] == "reset"):
		if !strings.HasPrefix(args[2], prefix) {
			return fmt.Errorf("refusing to drop %q: not a scratch database", args[2])
		}
		name := pgx.Identifier{args[2]}.Sanitize()
		if err := exec(ctx, args[1], "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil || args[0] == "drop" {
			return err
		}
		return exec(ctx, args[1], "CREATE DATABASE "+name)
	}
	return fmt.Errorf("usage: scratchdb create DSN | scratchdb drop|reset DSN NAME")
}

func create(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := prefix + hex.EncodeToString(b)
	if err := exec(ctx, dsn, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return err
	}
	scratch := dsn + " dbname=" + name
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return err
		}
		u.Path = "/" + name
		scratch = u.String()
	}
	sslmode := "disable"
	if cfg.TLSConfig != nil {
		sslmode = "require"
	}
	vars := [][2]string{
		{"SCRATCH_DB", name}, {"SCRATCH_DSN", scratch},
		{"PGHOST", cfg.Host}, {"PGPORT", strconv.Itoa(int(cfg.Port))}, {"PGUSER", cfg.User},
		{"PGDATABASE", name}, {"PGSSLMODE", sslmode},
	}
	if cfg.Password != "" {
		vars = append(vars, [2]string{"PGPASSWORD", cfg.Password})
	}
	for _, v := range vars {
		fmt.Printf("%s='%s'\n", v[0], strings.ReplaceAll(v[1], "'", `'\''`))
	}
	return nil
}

func exec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}
