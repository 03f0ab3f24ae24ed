package gated

import (
	"context"
	"strconv"
	"time"
)

// Deadlines into the database (gate_statement_timeout, gate_lock_timeout).
//
// The fixed parts cost nothing per operation: they are startup parameters of every physical
// connection (statement_timeout = the configured duration, or the cap of deadline:<dur>;
// lock_timeout), so every statement, in a transaction or not, runs under them, and RESET or
// SET ... TO DEFAULT returns to them.
//
// Only the deadline part moves. In a transaction the context's remaining time, rounded down to
// a millisecond, is set with SET LOCAL as part of beginning it (pgx: in BEGIN's own round trip).
// Outside transactions a SET before every statement would double its round trips, so the session
// value is set only when it changes, to the remaining time rounded up to a coarse step (at most
// 25% above it): callers with the same per-request deadline find it already in force. The
// client's context still ends the statement at the deadline itself; the server's limit is the
// backstop for a cancel request that cannot reach the server, and frees the backend soon after.

// timeouts is the Connector's statement and lock timeout configuration.
type timeouts struct {
	deadline bool  // the statement timeout follows the context's deadline
	baseMs   int64 // statement_timeout in the startup parameters: fixed, or deadline's cap; 0 none
	lockMs   int64 // lock_timeout in the startup parameters; 0 none
	pooled   bool  // gate_pooler=transaction: no session value outside transactions
}

func newTimeouts(cfg *Config) timeouts {
	return timeouts{deadline: cfg.StatementDeadline, baseMs: ceilMs(cfg.StatementTimeout), lockMs: ceilMs(cfg.LockTimeout), pooled: cfg.Pooler != ""}
}

// startupParams returns the run-time parameters every physical connection starts with.
func (l timeouts) startupParams() map[string]string {
	m := map[string]string{}
	if l.baseMs > 0 {
		m["statement_timeout"] = strconv.FormatInt(l.baseMs, 10)
	}
	if l.lockMs > 0 {
		m["lock_timeout"] = strconv.FormatInt(l.lockMs, 10)
	}
	return m
}

// remainingMs returns the statement limit the deadline of ctx asks for, before rounding, and
// false when the limit is the base one (no deadline, or a cap shorter than the deadline).
func (l timeouts) remaining(ctx context.Context) (time.Duration, bool) {
	if !l.deadline {
		return 0, false
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	rem := time.Until(dl)
	if l.baseMs > 0 && rem >= time.Duration(l.baseMs)*time.Millisecond {
		return 0, false
	}
	return rem, true
}

// txSet returns the SET LOCAL that gives a transaction beginning on pc under ctx its statement
// limit, or "" when the session's value is already the one wanted. The limit is at most the
// remaining time (rounded down to a millisecond, at least 1).
func (l timeouts) txSet(ctx context.Context, pc *physConn) string {
	rem, ok := l.remaining(ctx)
	if !ok {
		if pc.sess.stmtMs == 0 {
			return ""
		}
		return "set local statement_timeout to default"
	}
	return "set local statement_timeout = " + strconv.FormatInt(max(rem.Milliseconds(), 1), 10)
}

// sessionSet returns the statement that gives pc's session the statement limit for a statement
// outside a transaction under ctx, "" when it is already in force, and the value for
// session.stmtMs once it has run.
func (l timeouts) sessionSet(ctx context.Context, pc *physConn) (string, int64) {
	var want int64 // the base
	if rem, ok := l.remaining(ctx); ok {
		want = roundUpMs(ceilMs(max(rem, time.Millisecond)))
		if l.baseMs > 0 && want >= l.baseMs {
			want = 0
		}
	}
	switch {
	case want == pc.sess.stmtMs:
		return "", want
	case want == 0:
		return "reset statement_timeout", 0
	}
	return "set statement_timeout = " + strconv.FormatInt(want, 10), want
}

// applySession gives pc's session the statement limit for a statement outside a transaction
// under ctx. It is part of the operation: what it sends counts as sent.
func (l timeouts) applySession(ctx context.Context, pc *physConn) error {
	if !l.deadline || l.pooled {
		// Behind a transaction pooler a session value would stay on whichever server
		// connection the pooler chose, for other clients: the limit holds in transactions only.
		return nil
	}
	set, want := l.sessionSet(ctx, pc)
	if set == "" {
		return nil
	}
	if err := pc.inner.ExecSet(ctx, set); err != nil {
		return err
	}
	pc.sess.stmtMs = want
	return nil
}

// ceilMs returns d in milliseconds, rounded up: PostgreSQL's unit for both settings.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// roundUpMs rounds ms up to the next of 1, 2, ... 10 and then of the E12 series (12, 15, 18, 22,
// 27, 33, 39, 47, 56, 68, 82, 100, 120, ...), so that deadlines a little apart map to one session value, never more than 25% above.
func roundUpMs(ms int64) int64 {
	if ms <= 10 {
		return ms
	}
	scale := int64(1)
	for ms > 100*scale {
		scale *= 10
	}
	for _, m := range [...]int64{12, 15, 18, 22, 27, 33, 39, 47, 56, 68, 82} {
		if ms <= m*scale {
			return m * scale
		}
	}
	return 100 * scale
}

// noteSessionChange forgets what gated knows of pc's session statement_timeout when query may
// change it behind gated's back (SET statement_timeout, RESET, DISCARD ALL): the next statement
// outside a transaction then sets it again. Only in deadline mode, where gated keeps that record.
func (l timeouts) noteSessionChange(pc *physConn, query string) {
	if l.deadline && (containsFold(query, "statement_timeout") || containsFold(query, "reset") || containsFold(query, "discard")) {
		pc.sess.stmtMs = -1
	}
}

// containsFold reports whether s contains the lower-case ASCII word w in any case, without
// allocating.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		j := 0
		for ; j < len(w); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != w[j] {
				break
			}
		}
		if j == len(w) {
			return true
		}
	}
	return false
}
