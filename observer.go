package gated

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// An Observer receives gated's measurements as they happen: the durations of every admitted
// operation (wait, connect, hold) and of every call into the inner driver, and one event per
// refusal, cancellation, server-side timeout, unknown commit and physical connection opened,
// closed or failed. Put one in [Config.Observer], or attach one to a Connector already made
// (one from sql.Open, found with [FromDB]) with [Connector.Attach]; gatedprom and gatedotel
// (modules of their own) attach theirs and turn the events into Prometheus and OpenTelemetry
// metrics and trace events.
//
// Observe is called synchronously on the goroutine of the operation (or of the pool's background
// work), outside every lock of gated, from many goroutines at once: it must be safe for
// concurrent use, fast and non-blocking, because it runs on the path of every database call. gated
// passes the Event by value and allocates nothing to call it; an Observer that wants the same
// of itself must not retain e.Err or e.Context.
//
// The counters among the events are also in [Stats], exactly; an Observer is for what Stats
// cannot hold, distributions of durations, or for systems that count events themselves.
type Observer interface {
	Observe(e Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// observer is the sink for a gate set's measurements: the Observers attached to it (the first
// Config's Observer, then those of Connector.Attach) and the Logger of its first Config.
// Nothing attached is the common case, and every method checks that first, inline, so that
// recording costs one atomic load then. Counters that Stats reports are kept by the gate and
// the pool whatever is attached.
type observer struct {
	sinks   atomic.Pointer[[]*attachment] // nil when none is attached; a stored slice is never modified
	mu      sync.Mutex                    // serializes attach and detach
	log     *slog.Logger
	dsn     string     // to redact passwords from connection errors before logging them
	connLog summarizer // connection failures
}

// An attachment is one Observer attached; its address tells attachments of one Observer apart.
type attachment struct{ o Observer }

// attached reports whether an Observer is attached.
func (o *observer) attached() bool { return o.sinks.Load() != nil }

// emit sends e to every attached Observer, in the order they were attached.
func (o *observer) emit(e Event) {
	if l := o.sinks.Load(); l != nil {
		for _, a := range *l {
			a.o.Observe(e)
		}
	}
}

// attach adds x to the Observers and returns the function that removes it again, which is
// idempotent.
func (o *observer) attach(x Observer) (detach func()) {
	a := &attachment{x}
	o.mu.Lock()
	defer o.mu.Unlock()
	var l []*attachment
	if old := o.sinks.Load(); old != nil {
		l = append(l, *old...)
	}
	l = append(l, a)
	o.sinks.Store(&l)
	return func() { o.detach(a) }
}

func (o *observer) detach(a *attachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := o.sinks.Load()
	if old == nil {
		return
	}
	var l []*attachment
	for _, b := range *old {
		if b != a {
			l = append(l, b)
		}
	}
	if len(l) == 0 {
		o.sinks.Store(nil)
	} else {
		o.sinks.Store(&l)
	}
}

// initObserve attaches the Config's Observer and Logger to the set's gates and pool. Connectors
// that share the set by gate_name share its observer: the first Config's Observer and Logger,
// and every Observer attached to any of them.
func (set *gateSet) initObserve(cfg *Config) {
	set.obs.log, set.obs.dsn = cfg.Logger, cfg.DSN
	if cfg.Observer != nil {
		set.obs.attach(cfg.Observer)
	}
	set.obs.connLog.write = set.obs.logConnectFailures
	set.pool.obs = &set.obs
	for _, g := range set.gates() {
		g.wl.refusals.write = func(n [3]int64, _ error) { set.obs.logRefusals(g.name, n) }
	}
}

// closeObserve writes the log lines still pending, so that nothing is lost and no timer outlives
// the set.
func (set *gateSet) closeObserve() {
	for _, g := range set.gates() {
		g.wl.refusals.stop()
	}
	set.obs.connLog.stop()
}

// The Logger of a Connector's Config gets only what an operator must act on: unknown commits
// (observer.commitUnknown, at once, Error), failures of the server or the network to open a
// connection (Error) and refusals by the gates (Warn), the last two summarized by a summarizer
// into at most one line per refusalLogInterval. A caller's own short deadline, a cancellation
// and a connection closed for its age are not logged: they are counted in Stats.

// refusalLogInterval is the shortest time between two log lines summarizing refusals of one
// workload, or connection failures.
const refusalLogInterval = time.Second

func (o *observer) logRefusals(workload string, n [3]int64) {
	o.log.Warn("gated: operations refused",
		slog.String("workload", workload), slog.Int64("full", n[0]), slog.Int64("timeout", n[1]),
		slog.Int64("displaced", n[2]))
}

func (o *observer) logConnectFailures(n [3]int64, last error) {
	o.log.Error("gated: opening a physical connection failed",
		slog.Int64("failures", n[0]), slog.String("last_error", redact(last.Error(), o.dsn)))
}

// A summarizer turns events that can come by the thousand into at most one log line per
// refusalLogInterval: the first event is written at once, later ones are counted and written
// together when the interval has passed. Nothing is lost; stop writes what is pending.
type summarizer struct {
	write func(counts [3]int64, last error) // set before use; counts by the index add was given

	mu      sync.Mutex
	counts  [3]int64
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
	if s.counts == [3]int64{} {
		s.mu.Unlock()
		return
	}
	counts, last := s.takeLocked(time.Now())
	s.mu.Unlock()
	s.write(counts, last)
}

func (s *summarizer) takeLocked(now time.Time) ([3]int64, error) {
	counts, last := s.counts, s.lastErr
	s.counts, s.lastErr, s.last = [3]int64{}, nil, now
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
