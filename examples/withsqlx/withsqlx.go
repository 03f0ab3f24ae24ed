// Package withsqlx shows gated under sqlx (github.com/jmoiron/sqlx) on PostgreSQL.
//
// sqlx chooses its bind variables by the driver's name, and does not know "gated": left alone it
// sends `?` to PostgreSQL. Name the database behind the gate instead, in one of two ways:
//
//	db, err := gated.Open(dsn)             // gated's *sql.DB settings
//	dbx := sqlx.NewDb(db, "postgres")      // $1, $2, ... for this handle
//
// or, once at startup, for every handle sqlx opens on "gated":
//
//	sqlx.BindDriver("gated", sqlx.DOLLAR)
//	dbx, err := sqlx.Open("gated", dsn)
//
// Everything else is sqlx as usual; a refusal by the gate reaches the caller as gated's error
// (gated.IsRejected), through sqlx's calls.
package withsqlx

import (
	"github.com/gatedsql/gated"
	"github.com/jmoiron/sqlx"
)

// Open opens a gated *sql.DB on dsn with [gated.Open] and wraps it for sqlx with PostgreSQL's
// bind variables ($1, $2, ...). The inner driver is pgx unless dsn sets gate_driver=postgres
// (lib/pq); both speak PostgreSQL, so the bind type is DOLLAR either way. Open does no I/O and
// fails only on a bad DSN.
func Open(dsn string) (*sqlx.DB, error) {
	db, err := gated.Open(dsn)
	if err != nil {
		return nil, err
	}
	return sqlx.NewDb(db, "postgres"), nil
}
