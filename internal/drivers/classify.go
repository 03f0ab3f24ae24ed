package drivers

import (
	"errors"
	"strings"
)

// The classification of the servers' errors, from the SQLSTATE and fields that pgconn.PgError and
// pq.Error carry: whether a server's answer was lost, and whether it refused a stale statement.

// staleRefusal reports whether a server error with these fields is the server's refusal of a
// prepared statement itself, before anything of it ran: a cached plan whose result type a
// migration changed (0A000 raised by RevalidateCachedQuery, "cached plan must not change result
// type") or a statement name that no longer exists (26000 raised by FetchPreparedStatement, after
// DISCARD ALL or DEALLOCATE), raised for the top-level statement and not inside a function or
// procedure (no Where context). The class alone proves nothing: 0A000 is feature_not_supported,
// which a procedure raises after its COMMIT as readily. The answer holds for one statement sent
// alone, as every prepared statement is; a simple-protocol string may hold a COMMIT before the
// session's own stale EXECUTE, so the caller of an unprepared query checks OneStatement too.
//
// The routine names are the server's source identifiers, the same in every lc_messages locale;
// a server that sends none (some PostgreSQL-compatible ones) is matched by PostgreSQL's English
// message. The drivers' files read the fields from their error types (Conn.refusedStale).
func staleRefusal(code, msg, where, routine string) bool {
	if where != "" {
		return false
	}
	switch code {
	case "0A000":
		return routine == "RevalidateCachedQuery" || routine == "" && msg == "cached plan must not change result type"
	case "26000":
		return routine == "FetchPreparedStatement" || routine == "" && strings.HasPrefix(msg, "prepared statement ")
	}
	return false
}

// OneStatement reports whether query is certainly a single SQL statement: it has no semicolon
// but at its end. A statement with one inside a literal or comment is taken for several, which
// only forgoes the stale-statement retry.
func OneStatement(query string) bool {
	return !strings.Contains(strings.TrimRight(query, "; \t\r\n"), ";")
}

// SQLState returns the SQLSTATE of a server error in err's chain (pgconn.PgError and pq.Error
// both have a SQLState method), or "" when the server did not answer with an error.
func SQLState(err error) string {
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		return state.SQLState()
	}
	return ""
}

// AnswerLost reports whether err says that the server's answer did not arrive: no SQLSTATE at
// all (the connection failed), a connection exception (class 08), or an operator intervention
// that ended the session (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
// 57P04 database_dropped, 57P05 idle_session_timeout). A backend terminated while it waits for
// synchronous replication reports 57P01 after the commit was applied locally, so none of these
// proves that a COMMIT failed.
func AnswerLost(err error) bool {
	s := SQLState(err)
	return s == "" || strings.HasPrefix(s, "08") || strings.HasPrefix(s, "57P")
}
