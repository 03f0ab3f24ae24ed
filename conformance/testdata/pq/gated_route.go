package pqtest

// Copied into lib/pq's internal/pqtest by conformance/pq.sh, which rewrites DB's
// sql.Open("postgres", ...) to conformanceOpen(...) and adds ConformanceReport after m.Run() in
// lib/pq's TestMain. With CONFORMANCE_GATED set (to gate_ parameters), the helper opens through
// gated with lib/pq inside. pqtest cannot import gated (gated imports lib/pq, whose tests import
// pqtest: a cycle), so it names gated by its driver name; conformance's gated_route_test.go, an
// external test file of package pq_test, imports gated to register it.

import (
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
)

var (
	conformanceGated  = os.Getenv("CONFORMANCE_GATED")
	conformanceRouted atomic.Int64
)

func conformanceOpen(dsn string) (*sql.DB, error) {
	if conformanceGated == "" {
		return sql.Open("postgres", dsn)
	}
	db, err := sql.Open("gated", withParams(dsn, append([]string{"gate_driver=postgres"}, strings.Fields(conformanceGated)...)))
	if err != nil {
		return nil, err
	}
	if t := fmt.Sprintf("%T", db.Driver()); t != "*gated.Driver" {
		panic("conformance: the *sql.DB's driver is " + t + ", not gated's")
	}
	conformanceRouted.Add(1)
	return db, nil
}

// withParams appends key=value pairs to a URL or keyword/value DSN.
func withParams(dsn string, params []string) string {
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

// ConformanceReport prints how many *sql.DB went through gated, and returns 1 when gated was asked
// for and none did.
func ConformanceReport() int {
	if conformanceGated == "" || flag.Lookup("test.list").Value.String() != "" {
		return 0
	}
	fmt.Printf("conformance: %d *sql.DB opened through gated\n", conformanceRouted.Load())
	if conformanceRouted.Load() == 0 {
		fmt.Println("conformance: nothing was routed through gated")
		return 1
	}
	return 0
}
