// Package pgcontract holds the contract tests of gated on a real PostgreSQL, run through gated's
// public API only (sql.Open("gated", ...), gated.Open, NewConnector, FromDB, Stats, the errors),
// each case once with pgx and once with lib/pq: permits released when the work has ended,
// refusals, waits, cancels, server limits, overload, a connection terminated in a transaction, a
// restarting server, repeated failures, statements, pinned connections, Close and malformed
// DSNs. Every test ends with every permit back. The cases that read gated's internals stay in
// the root package.
//
// The server is found as internal/pgtest describes (GATED_TEST_DATABASE_URL, then
// 127.0.0.1:5432, then a private cluster, then a container); with none the tests skip, or fail
// when GATED_TEST_REQUIRE_DB=1. The package has no code of its own: it is a module so that the
// root package's listing holds the driver and the tests that need its internals.
package pgcontract
