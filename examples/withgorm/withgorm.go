// Package withgorm shows gated under GORM (gorm.io/gorm) on PostgreSQL.
//
// GORM's usual gorm.Open(postgres.Open(dsn)) opens its own pgx pool and bypasses gated, and the
// server then rejects the gate_ keys. Hand GORM the gated *sql.DB instead:
//
//	db, err := gated.Open(dsn)
//	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db, DriverName: "gated"}), &gorm.Config{})
//
// DriverName matters with lib/pq (gate_driver=postgres): when it is empty or "pgx", GORM's
// migrator passes pgx.QueryExecModeSimpleProtocol as an extra query argument when it reads a
// table's columns, which only pgx understands; lib/pq then fails the second AutoMigrate of a
// table with "pq: got 2 parameters but the statement requires 1" (plain lib/pq does the same).
// With a Conn, GORM uses DriverName for nothing else.
//
// GORM then runs everything through the gate: AutoMigrate, queries, its default transaction
// around Create and Save, and db.Transaction. A refusal by the gate reaches the caller as gated's
// error (gated.IsRejected). GORM does not own the *sql.DB: close it yourself.
package withgorm

import (
	"github.com/gatedsql/gated"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// Open opens a gated *sql.DB on dsn with [gated.Open] and hands it to GORM's PostgreSQL dialect.
// The inner driver is pgx unless dsn sets gate_driver=postgres (lib/pq); both work. cfg may be nil for
// GORM's defaults. gorm.Open pings the database (through the gate) unless cfg disables it; on any
// error the *sql.DB is closed. Close it with gdb.DB() and Close when done.
func Open(dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	db, err := gated.Open(dsn)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &gorm.Config{}
	}
	gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db, DriverName: "gated"}), cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	return gdb, nil
}
