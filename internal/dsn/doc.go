// Package dsn is the syntax of gated's DSNs: it tells a URL or mysql DSN (query form) from a
// libpq keyword/value DSN, takes the gate_ keys out of either and leaves the rest, byte for byte,
// for the inner driver (pgx, lib/pq, go-sql-driver/mysql or any other), writes keys back into a
// DSN, and removes passwords from a DSN and from messages that may quote one.
//
// It never touches what a key means: which gate_ keys exist, their values, defaults and checks
// belong to gated's key table, which hands Split a predicate for the keys it takes out and Join
// the keys and values it writes. It never opens a connection and never logs; its errors (an
// *Error) name a key and never quote the DSN, so that they cannot leak a password.
package dsn
