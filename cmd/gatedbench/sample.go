package main

import (
	"context"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/gatedsql/gated"
	"github.com/jackc/pgx/v5"
)

// Sampling periods: in-process gauges are cheap to read (runtime/metrics does not stop the world;
// Stats takes the gate's mutex briefly), a server sample is a query on the admin connection.
const (
	processEvery = 5 * time.Millisecond
	serverEvery  = 10 * time.Millisecond
)

// peaks are the maxima of gauges sampled during one measurement.
type peaks struct {
	Goroutines  int    // runtime goroutines, the benchmark's own included
	HeapBytes   uint64 // bytes in live and not yet swept heap objects (MemStats.HeapAlloc)
	LiveBytes   uint64 // bytes the last finished GC found live: the heap without its garbage
	ServerConns int    // backends in pg_stat_activity with the contender's application_name; -1: no sample
	Waiting     int    // gated: operations waiting for an execution permit (Stats().Waiting)
	Running     int    // gated: execution permits held
}

// sampler records peaks until stopped. It counts server connections over a connection of its own,
// opened when it starts and opened again if it breaks (a sample that times out closes it), so
// that a stalled server costs samples, not the rest of the run.
type sampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	pk   peaks
}

// startSampler starts sampling the process (and c's gate, when c is not nil) every processEvery
// and, on the server at url, the connections named app every serverEvery.
func startSampler(url, app string, c *gated.Connector) *sampler {
	s := &sampler{stop: make(chan struct{}), pk: peaks{ServerConns: -1}}
	s.wg.Add(2)
	go s.sampleProcess(c)
	go s.sampleServer(url, app)
	return s
}

// finish stops the sampler and returns the peaks it saw.
func (s *sampler) finish() peaks {
	close(s.stop)
	s.wg.Wait()
	return s.pk
}

func (s *sampler) sampleProcess(c *gated.Connector) {
	defer s.wg.Done()
	ms := []metrics.Sample{
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	t := time.NewTicker(processEvery)
	defer t.Stop()
	for {
		metrics.Read(ms)
		var st gated.Stats
		if c != nil {
			st = c.Stats()
		}
		s.mu.Lock()
		s.pk.Goroutines = max(s.pk.Goroutines, int(ms[0].Value.Uint64()))
		s.pk.HeapBytes = max(s.pk.HeapBytes, ms[1].Value.Uint64())
		s.pk.LiveBytes = max(s.pk.LiveBytes, ms[2].Value.Uint64())
		s.pk.Waiting = max(s.pk.Waiting, st.Waiting)
		s.pk.Running = max(s.pk.Running, st.Running)
		s.mu.Unlock()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sampleServer(url, app string) {
	defer s.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(serverEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if conn == nil || conn.IsClosed() {
			conn, _ = pgx.Connect(ctx, url) // nil on failure: tried again at the next tick
		}
		if conn != nil {
			var n int
			err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n)
			if err == nil {
				s.mu.Lock()
				s.pk.ServerConns = max(s.pk.ServerConns, n)
				s.mu.Unlock()
			}
		}
		cancel()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}
