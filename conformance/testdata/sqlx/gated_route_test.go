package sqlx

// Copied beside sqlx's package tests by conformance/sqlx.sh, which rewrites their
// Connect("postgres", pgdsn) to Connect(pgDriver, pgdsn). CONFORMANCE_SQLX_DRIVER names the
// driver: postgres (lib/pq, upstream's choice), pgx, or gated, with the inner driver in
// SQLX_POSTGRES_DSN's gate_driver. sqlx picks bind variables by driver name, so gated is bound to
// $1 placeholders as a user does.

import (
	"os"

	_ "github.com/gatedsql/gated"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// pgDriver is set before the package's init functions run, and so before ConnectAll.
var pgDriver = routeDriver()

func routeDriver() string {
	d := os.Getenv("CONFORMANCE_SQLX_DRIVER")
	switch d {
	case "":
		return "postgres"
	case "gated":
		BindDriver("gated", DOLLAR)
	}
	return d
}
