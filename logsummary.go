package gated

import (
	"log/slog"
	"sync"
	"time"
)

// The Logger of a Connector's Config gets only what an operator must act on: unknown commits
// (observer.commitUnknown, at once, Error), failures of the server or the network to open a
// connection (Error) and refusals by the gates (Warn), the last two summarized by a summarizer
// into at most one line per refusalLogInterval. A caller's own short deadline, a cancellation
// and a connection closed for its age are not logged: they are counted in Stats.

// refusalLogInterval is the shortest time between two log lines summarizing refusals of one
// workload, or connection failures.
const refusalLogInterval = time.Second

func (o *observer) logRefusals(workload string, n [2]int64) {
	o.log.Warn("gated: operations refused",
		slog.String("workload", workload), slog.Int64("full", n[0]), slog.Int64("timeout", n[1]))
}

func (o *observer) logConnectFailures(n [2]int64, last error) {
	o.log.Error("gated: opening a physical connection failed",
		slog.Int64("failures", n[0]), slog.String("last_error", redact(last.Error(), o.dsn)))
}

// A summarizer turns events that can come by the thousand into at most one log line per
// refusalLogInterval: the first event is written at once, later ones are counted and written
// together when the interval has passed. Nothing is lost; stop writes what is pending.
type summarizer struct {
	write func(counts [2]int64, last error) // set before use

	mu      sync.Mutex
	counts  [2]int64
	lastErr error
	last    time.Time   // when the last line was written
	timer   *time.Timer // pending write, or nil
	stopped bool        // after stop, every event is written at once: no timer may outlive the Connector
}

func (s *summarizer) add(i int, err error) {
	s.mu.Lock()
	s.counts[i]++
	if err != nil {
		s.lastErr = err
	}
	if s.timer != nil {
		s.mu.Unlock()
		return
	}
	now := time.Now()
	if wait := s.last.Add(refusalLogInterval).Sub(now); wait > 0 && !s.stopped {
		s.timer = time.AfterFunc(wait, s.flush)
		s.mu.Unlock()
		return
	}
	counts, last := s.takeLocked(now)
	s.mu.Unlock()
	s.write(counts, last)
}

func (s *summarizer) flush() {
	s.mu.Lock()
	s.timer = nil
	if s.counts == [2]int64{} {
		s.mu.Unlock()
		return
	}
	counts, last := s.takeLocked(time.Now())
	s.mu.Unlock()
	s.write(counts, last)
}

func (s *summarizer) takeLocked(now time.Time) ([2]int64, error) {
	counts, last := s.counts, s.lastErr
	s.counts, s.lastErr, s.last = [2]int64{}, nil, now
	return counts, last
}

func (s *summarizer) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil && !s.timer.Stop() {
		// The timer fired and its flush is about to write the pending counts.
		s.mu.Unlock()
		return
	}
	s.timer = nil
	s.mu.Unlock()
	s.flush()
}
