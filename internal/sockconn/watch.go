package sockconn

import (
	"context"
	"time"
)

// CancelGrace is how long after a context ended a lib/pq socket's blocking calls are cut short.
// lib/pq reacts to the context itself by sending the server a cancel request, and the statement
// then ends with the server's error; but only if lib/pq notices the context before its call
// returns: a socket cut at once would often win that race, and the server would go on running
// the statement with nobody to cancel it. The grace lets lib/pq's cancel go first; it matters
// only when the server does not answer, as in a network partition.
const CancelGrace = 100 * time.Millisecond

// A Watch is one driver call's context watch on a lib/pq socket: once the call's context has
// ended for the grace, the socket's blocking calls fail, until the call ends. It belongs to the
// call that armed it (the root's call), which ends it when it returns; an expiry that comes later
// does nothing. A socket has at most one: a call that begins while another's watch is armed (the
// open rows of a query) arms none, and the socket stays guarded by the first. The zero value is
// no watch.
type Watch struct {
	s    *Conn
	stop func() bool // context.AfterFunc's
	gen  uint64      // the socket's watchGen while this watch is armed
}

// Watch arms a watch for a call under ctx, or returns none when ctx never ends or another call's
// watch is armed. It allocates only when it arms one (as context.AfterFunc does).
func (s *Conn) Watch(ctx context.Context, grace time.Duration) Watch {
	if ctx.Done() == nil {
		return Watch{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watching {
		return Watch{}
	}
	s.watching = true
	gen := s.watchGen
	stop := context.AfterFunc(ctx, func() {
		if grace > 0 {
			t := time.NewTimer(grace)
			<-t.C
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.watchGen == gen && !s.closing {
			s.cutShort = true
			s.expireLocked(ctx)
		}
	})
	return Watch{s: s, stop: stop, gen: gen}
}

// Armed reports whether w is a watch.
func (w *Watch) Armed() bool { return w.s != nil }

// End ends the watch when its call returns, and reports whether it cut the socket's calls short:
// the socket's deadline has passed, and the connection's protocol state is unknown. It does
// nothing on no watch, or one that has ended.
func (w *Watch) End() (cutShort bool) {
	s := w.s
	if s == nil {
		return false
	}
	w.s = nil
	w.stop()
	return s.endWatch(w.gen)
}

// EndAnyWatch ends whichever watch is armed, as its End would, and reports whether it had cut the
// socket short. It ends a watch that must not outlive its connection's use.
func (s *Conn) EndAnyWatch() (cutShort bool) { return s.endWatch(anyWatch) }

// endWatch ends the armed watch gen (or whichever is armed, for anyWatch): an expiry of it that
// comes later does nothing. It reports whether the watch had cut the socket short.
func (s *Conn) endWatch(gen uint64) (cutShort bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.watching || (gen != anyWatch && gen != s.watchGen) {
		return false
	}
	cutShort = s.cutShort
	s.watching, s.cutShort = false, false
	s.watchGen++
	return cutShort
}

// anyWatch names, for endWatch, whichever watch is armed.
const anyWatch = ^uint64(0)

// Expire makes the socket's blocking calls fail now, their errors wrapping ctx's, unless the
// socket is being closed.
func (s *Conn) Expire(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked(ctx)
}

func (s *Conn) expireLocked(ctx context.Context) {
	if s.closing {
		return
	}
	err := context.Cause(ctx)
	s.expiredBy.Store(&err)
	s.Conn.SetDeadline(time.Now())
}
