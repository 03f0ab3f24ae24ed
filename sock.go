package gated

import "github.com/gatedsql/gated/internal/sockconn"

// sockConn is the socket gated dials for a pgx or lib/pq connection (internal/sockconn): it counts
// the bytes a connection wrote, checks an idle connection's socket before its next write, reads
// the age of the server's last data, and for lib/pq drains on Close and watches each call's
// context.
type sockConn = sockconn.Conn
