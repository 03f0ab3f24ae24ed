package gated

import "github.com/gatedsql/gated/internal/dsn"

// Passwords never appear in what gated returns or prints, not even in part: the inner drivers'
// errors, the connection failures gated logs and a printed Config all go through internal/dsn's
// redaction, which finds a DSN's passwords in every spelling a driver or fmt may print them.

// redacted is what replaces a password, or a run of its pieces.
const redacted = dsn.Redacted

// redact returns msg with every password that s holds removed (dsn.Redact).
func redact(msg, s string) string { return dsn.Redact(msg, s) }

// redactErr returns err with the passwords in dsn removed from its message; errors.As still finds
// the driver's type in it.
func redactErr(err error, s string) error { return dsn.RedactError(err, s) }

// connectError is the error of a failed attempt to open a physical connection: the driver's own,
// unchanged, as the plain driver returns it, so that errors.Is, errors.As and errors.Unwrap find
// what they find there (lib/pq's error for several hosts unwraps to one error per host, Unwrap()
// []error). Two exceptions, each keeping errors.As and errors.Is for the driver's types: a message
// that quotes a piece of a password (a driver may print a host it misread from a malformed URL)
// is redacted, and an error matching driver.ErrBadConn is hidden from errors.Is for that
// sentinel (see hideBadConn), because database/sql would retry the operation through the gate
// while its permit is still held.
func connectError(err error, dsn string) error {
	if msg := err.Error(); redact(msg, dsn) != msg {
		err = redactErr(err, dsn)
	}
	return hideBadConn(err)
}
