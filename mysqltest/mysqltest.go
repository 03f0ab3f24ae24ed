// Package mysqltest finds the MySQL or MariaDB server that gated's MySQL tests run against, and
// holds those tests: they import go-sql-driver/mysql, which the root module must not depend on.
//
// The server is GATED_TEST_MYSQL_DSN (a go-sql-driver/mysql DSN), else
// root@tcp(127.0.0.1:3306)/test. Without an answering server the tests skip, or fail when
// GATED_TEST_REQUIRE_DB=1, as CI (.ci/run) sets.
package mysqltest

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
)

// EnvDSN names the environment variable with the test server's DSN.
const EnvDSN = "GATED_TEST_MYSQL_DSN"

// DefaultDSN is tried when EnvDSN is unset: the local server as root without a password.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/test"

var (
	once   sync.Once
	found  string
	reason error
)

// DSN returns the DSN of a MySQL or MariaDB server that answered a ping, or skips t (fails it
// when GATED_TEST_REQUIRE_DB=1). The server is looked for once per test binary.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dsn := os.Getenv(EnvDSN)
		if dsn == "" {
			dsn = DefaultDSN
		}
		db, err := sql.Open("mysql", dsn)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = db.PingContext(ctx)
			cancel()
			db.Close()
		}
		found, reason = dsn, err
	})
	if reason != nil {
		if os.Getenv("GATED_TEST_REQUIRE_DB") == "1" {
			t.Fatalf("mysqltest: no MySQL/MariaDB server answers (%v); set %s", reason, EnvDSN)
		}
		t.Skipf("mysqltest: no MySQL/MariaDB server answers (%v); set %s or start one on 127.0.0.1:3306", reason, EnvDSN)
	}
	return found
}
