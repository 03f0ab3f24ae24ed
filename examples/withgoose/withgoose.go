// Package withgoose shows goose (github.com/pressly/goose/v3) migrating PostgreSQL through gated,
// with PostgreSQL's session advisory lock so that two instances never migrate at once.
//
//	db, err := gated.Open("postgres://app@db/shop?gate_concurrent=2") // B ≥ 2: see below
//	p, err := withgoose.NewProvider(db)
//	results, err := p.Up(ctx)
//
// # Why B ≥ 2
//
// goose takes the session lock on one *sql.Conn and keeps that connection, with its execution
// permit, for the whole run; SQL migrations and Go migrations in a transaction run on it. A Go
// migration without a transaction (a [goose.GoFunc] with RunDB, such as [LowerEmails]) runs on the
// *sql.DB instead, and so needs a second permit while goose holds the first. gated's gate is not
// reentrant: it does not know that the caller already holds a permit, so with B=1 that operation
// waits for a permit that only its own caller could give back, and is refused after
// gate_queue_wait (gated.ErrAdmissionTimeout; with gate_queue=0 at once, gated.ErrAdmissionFull).
// goose stops, releases the lock and reports the migrations applied so far. With B ≥ 2 (and no
// other load taking the second permit for longer than gate_queue_wait) the migration runs. goose's
// own guard against this deadlock checks only SetMaxOpenConns(1), which gated.Open never sets.
package withgoose

import (
	"context"
	"database/sql"
	"embed"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var embedded embed.FS

// Migrations is the example's SQL migrations (1: table accounts, 2: an index built
// CONCURRENTLY, outside a transaction).
var Migrations, _ = fs.Sub(embedded, "migrations")

// LowerEmails is migration 3, a Go migration without a transaction: it lowers the accounts'
// emails in batches of 1000, each batch committed on its own, as a backfill on a large table
// would be (one transaction would hold every row lock until the end). Its down does nothing.
var LowerEmails = goose.NewGoMigration(3,
	&goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
		for {
			res, err := db.ExecContext(ctx, `UPDATE accounts SET email = lower(email)
				WHERE id IN (SELECT id FROM accounts WHERE email <> lower(email) LIMIT 1000)`)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err
			}
		}
	}},
	nil)

// NewProvider returns a goose provider for [Migrations] and [LowerEmails] on db (a gated *sql.DB
// on PostgreSQL with B ≥ 2, see the package doc), which takes PostgreSQL's session advisory lock
// for every Up and Down. opts are added after the example's own (goose.WithVerbose, a table name,
// ...). It does no I/O.
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	opts = append([]goose.ProviderOption{
		goose.WithSessionLocker(locker),
		goose.WithGoMigrations(LowerEmails),
		goose.WithDisableGlobalRegistry(true),
	}, opts...)
	return goose.NewProvider(goose.DialectPostgres, db, Migrations, opts...)
}
