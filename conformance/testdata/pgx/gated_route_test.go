package stdlib_test

// Copied beside pgx's stdlib/sql_test.go by conformance/pgx.sh, which rewrites that file's
// stdlib.OpenDB( to routeOpenDB(, sql.Open( to routeOpen( and driverConn.(*stdlib.Conn) to
// asStdlibConn(driverConn). With CONFORMANCE_GATED set (to gate_ parameters, e.g.
// "gate_driver=pgx"), every *sql.DB the tests open goes through gated; without it they run on
// plain pgx exactly as upstream.

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

var (
	gateParams = os.Getenv("CONFORMANCE_GATED")
	routed     atomic.Int64 // *sql.DB opened through gated
)

func TestMain(m *testing.M) {
	code := m.Run()
	if gateParams != "" && flag.Lookup("test.list").Value.String() == "" {
		fmt.Printf("conformance: %d *sql.DB opened through gated\n", routed.Load())
		if routed.Load() == 0 && code == 0 {
			fmt.Println("conformance: nothing was routed through gated")
			code = 1
		}
	}
	os.Exit(code)
}

// withParams appends space-separated key=value pairs to a URL or keyword/value DSN.
func withParams(dsn string, params ...string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		for _, p := range params {
			dsn += sep + p
			sep = "&"
		}
		return dsn
	}
	return strings.TrimSpace(dsn + " " + strings.Join(params, " "))
}

func openGated(dsn string) *sql.DB {
	db, err := sql.Open("gated", dsn)
	if err != nil {
		panic(fmt.Sprintf("conformance: sql.Open(gated): %v", err))
	}
	if _, ok := gated.FromDB(db); !ok {
		panic("conformance: the *sql.DB is not gated's")
	}
	routed.Add(1)
	return db
}

// routeOpenDB stands for stdlib.OpenDB. A ConnConfig built by pgx.ParseConfig keeps its
// connection string; the only field the tests change afterwards is DefaultQueryExecMode, which
// pgx also reads from the default_query_exec_mode parameter. Options (hooks on pgx's own
// connector) have no equivalent through a DSN: such a call cannot be routed and panics, and
// pgx.sh leaves the tests that make it out of the suite.
func routeOpenDB(config pgx.ConnConfig, opts ...stdlib.OptionOpenDB) *sql.DB {
	if gateParams == "" {
		return stdlib.OpenDB(config, opts...)
	}
	if len(opts) > 0 {
		panic("conformance: stdlib.OpenDB with options cannot be routed through gated")
	}
	params := strings.Fields(gateParams)
	if config.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		mode := strings.ReplaceAll(config.DefaultQueryExecMode.String(), " ", "_")
		params = append(params, "default_query_exec_mode="+mode)
	}
	return openGated(withParams(config.ConnString(), params...))
}

// routeOpen stands for sql.Open: the driver the test names becomes gated's inner driver.
func routeOpen(driverName, dsn string) (*sql.DB, error) {
	if gateParams == "" {
		return sql.Open(driverName, dsn)
	}
	params := strings.Fields(gateParams)
	for i, p := range params {
		if strings.HasPrefix(p, "gate_driver=") {
			params = append(params[:i], params[i+1:]...)
			break
		}
	}
	return openGated(withParams(dsn, append(params, "gate_driver="+driverName)...)), nil
}

// asStdlibConn gives the *stdlib.Conn that (*sql.Conn).Raw passes on plain pgx, through
// gated.Unwrap when the connection is gated's.
func asStdlibConn(driverConn any) *stdlib.Conn {
	if c, ok := driverConn.(*stdlib.Conn); ok {
		return c
	}
	inner, err := gated.Unwrap(context.Background(), driverConn)
	if err != nil {
		panic(fmt.Sprintf("conformance: gated.Unwrap: %v", err))
	}
	return inner.(*stdlib.Conn)
}
