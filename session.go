package gated

// A session is what gated knows of a physical connection's session on the server: one record
// per physical connection, written when a call ends (call.end) from what the server reported, and
// by gated's own SET of statement_timeout (timeout.go). The transaction status is read again when
// a call begins, since the application may have run statements through Unwrap in between.
// Nothing of one call is kept in it beyond what the next calls and the binding's end must know.
type session struct {
	// tx is the transaction status the server last reported, as the driver heard it: 'I' idle,
	// 'T' in a transaction, 'E' in a failed transaction; '?' when the driver does not report
	// it (drivers.Conn.TxStatus).
	tx byte
	// stmtMs is the statement_timeout gated set on the session: 0 the startup value, -1 unknown.
	stmtMs int64
	// mayRun is latched by a call that ended with its context ended and its connection given up
	// by the driver: the server may still run its statement, which the connection's destroy must
	// stop or await (drivers.Conn.Close).
	mayRun bool
}

// idle reports whether the server reported the session outside any transaction: only then does
// gated send statements of its own on it.
func (s *session) idle() bool { return s.tx == 'I' }
