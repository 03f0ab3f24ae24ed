package mysqltest_test

import (
	"context"
	"database/sql/driver"
	"testing"

	"github.com/gatedsql/gated/mysqltest"
	"github.com/go-sql-driver/mysql"
)

// The cost gated adds to every new MySQL connection: one SELECT CONNECTION_ID() round trip,
// compared with opening the connection itself.

func connector(b *testing.B) driver.Connector {
	cfg, err := mysql.ParseDSN(mysqltest.DSN(b))
	if err != nil {
		b.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkConnect(b *testing.B) {
	c := connector(b)
	ctx := context.Background()
	for b.Loop() {
		dc, err := c.Connect(ctx)
		if err != nil {
			b.Fatal(err)
		}
		dc.Close()
	}
}

func BenchmarkConnectionID(b *testing.B) {
	dc, err := connector(b).Connect(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer dc.Close()
	q := dc.(driver.QueryerContext)
	dest := make([]driver.Value, 1)
	for b.Loop() {
		rows, err := q.QueryContext(context.Background(), "SELECT CONNECTION_ID()", nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := rows.Next(dest); err != nil {
			b.Fatal(err)
		}
		rows.Close()
	}
}
