package gated

import (
	"context"
	"database/sql/driver"
	"sync"
	"sync/atomic"
)

// Prepared statements. database/sql prepares a statement once per connection it runs on and
// keeps the driver.Stmt; gated returns a virtual statement (stmt.go) that may run on any physical
// connection, so each physical connection keeps its own prepared copy. The copies are keyed by
// a stmtShare, not by query text: a share stands for one query text while at least one
// application statement for it is open, and dies with the last one. So
//
//   - an unprepared query never runs on a statement the application prepared (runDirect does
//     not look here);
//   - once no open *sql.Stmt needs a copy, it is closed before its connection's next operation
//     (a sweep, when the registry's dead count moved), and a later Prepare of the same text
//     makes a new share and new copies — never the old ones, whose plan a migration or a
//     DISCARD ALL may have invalidated;
//   - a copy the server refuses before running anything of it (0A000 "cached plan must not
//     change result type", 26000 "prepared statement does not exist", each raised for the
//     statement itself and not inside a procedure it calls; see internal/drivers'
//     staleRefusal) is evicted, and the statement retried once when nothing else ran in the
//     binding;
//   - at most maxCachedStmts copies are kept per connection, the oldest closed first;
//   - none at all when the inner DSN asks for no named statements (drivers.Conn.ServerPrepares),
//     as behind a transaction-pooling PgBouncer: the statement then runs unprepared (stmt.go).

// maxCachedStmts bounds the prepared statements kept per physical connection.
const maxCachedStmts = 64

// A stmtShare is one query text with at least one open application statement.
type stmtShare struct {
	query string
	refs  atomic.Int32 // open virtual statements; changed under stmtRegistry.mu; 0 = dead for good
}

// A stmtRegistry holds a Connector's live shares.
type stmtRegistry struct {
	mu     sync.Mutex
	shares map[string]*stmtShare // guarded by mu
	dead   atomic.Uint64         // shares that died: connections sweep when it moved
}

// acquire returns the live share for query, counting one more open statement.
func (r *stmtRegistry) acquire(query string) *stmtShare {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.shares[query]
	if s == nil {
		if r.shares == nil {
			r.shares = make(map[string]*stmtShare)
		}
		s = &stmtShare{query: query}
		r.shares[query] = s
	}
	s.refs.Add(1)
	return s
}

// release counts one open statement less. It never blocks on I/O: database/sql may close a
// statement while holding its own locks.
func (r *stmtRegistry) release(s *stmtShare) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.refs.Add(-1) == 0 {
		delete(r.shares, s.query)
		r.dead.Add(1)
	}
}

// physStmt is a physical connection's prepared copy of a share.
type physStmt struct {
	share *stmtShare
	st    driver.Stmt
}

// stmtFor returns pc's copy of s, preparing it on first use.
func (pc *physConn) stmtFor(ctx context.Context, s *stmtShare) (driver.Stmt, error) {
	for _, ps := range pc.stmts {
		if ps.share == s {
			return ps.st, nil
		}
	}
	st, err := pc.prepareDriver(ctx, s.query)
	if err != nil {
		return nil, err
	}
	if len(pc.stmts) >= maxCachedStmts {
		pc.stmts[0].st.Close()
		pc.stmts = append(pc.stmts[:0], pc.stmts[1:]...)
	}
	pc.stmts = append(pc.stmts, physStmt{s, st})
	return st, nil
}

// evictStale removes pc's copy of s when err says the server refused the copy itself before
// running anything (refusedStale: a copy is always one statement sent with the extended protocol),
// and reports whether it did. Any other failure leaves the copy in place and is not retried.
func (pc *physConn) evictStale(err error, s *stmtShare) bool {
	return pc.inner.RefusedStale(err) && pc.evict(func(ps physStmt) bool { return ps.share == s })
}

// evictQuery removes pc's copy of the statement for query, and reports whether there was one.
func (pc *physConn) evictQuery(query string) bool {
	return pc.evict(func(ps physStmt) bool { return ps.share.query == query })
}

// evict closes and removes the first copy that match reports, and reports whether there was one.
func (pc *physConn) evict(match func(physStmt) bool) bool {
	for i, ps := range pc.stmts {
		if match(ps) {
			ps.st.Close()
			pc.stmts = append(pc.stmts[:i], pc.stmts[i+1:]...)
			return true
		}
	}
	return false
}

// sweep closes the copies no open statement needs any more, when a share died since the last
// sweep. It costs one atomic load otherwise.
func (pc *physConn) sweep(r *stmtRegistry) {
	dead := r.dead.Load()
	if dead == pc.sweptAt {
		return
	}
	pc.sweptAt = dead
	kept := pc.stmts[:0]
	for _, ps := range pc.stmts {
		if ps.share.refs.Load() == 0 {
			ps.st.Close()
		} else {
			kept = append(kept, ps)
		}
	}
	clear(pc.stmts[len(kept):])
	pc.stmts = kept
}
