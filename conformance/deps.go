//go:build conformance_deps

// Package conformance pins, through this file's imports, the versions of the projects whose test
// suites the scripts run, and the modules their tests import, so that go.mod and go.sum hold every
// checksum the runs need. The build tag keeps it out of every build.
package conformance

import (
	_ "github.com/gatedsql/gated"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/jackc/pgx/v5/tracelog"
	_ "github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	_ "github.com/stretchr/testify/assert"
	_ "github.com/stretchr/testify/require"
)
