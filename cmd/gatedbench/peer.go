package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
)

// The peer of gate_concurrent=auto: failsafe-go's adaptive limiter (Vegas-style thresholds on
// recent p90 execution times against an EWMA baseline, plus a throughput-vs-inflight check) with
// its defaults and queueing on (the initial and maximum rejection factors its BuildPrioritized
// documents as defaults, 2 and 3), around plain database/sql with SetMaxOpenConns(P). A permit is
// recorded after a success and dropped after a failure, as its documentation asks for timeouts.

const peerName = "failsafe-go"

// errPeerRefused wraps the limiter's refusal, so that the benchmark counts it as refused.
var errPeerRefused = errors.New("failsafe-go: limit exceeded")

// peer is the limiter and the database/sql pool behind it.
type peer struct {
	db  *sql.DB
	lim adaptivelimiter.AdaptiveLimiter[any]
}

func newPeer(db *sql.DB) *peer {
	return &peer{db: db, lim: adaptivelimiter.NewBuilder[any]().WithQueueing(2, 3).Build()}
}

// do runs f under a permit, waiting at most until ctx's deadline.
func (p *peer) do(ctx context.Context, f func(context.Context, *sql.DB) error) error {
	wait := time.Hour
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl)
	}
	permit, err := p.lim.AcquirePermitWithMaxWait(ctx, wait)
	if err != nil {
		if errors.Is(err, adaptivelimiter.ErrExceeded) {
			return fmt.Errorf("%w", errPeerRefused)
		}
		return err
	}
	if err := f(ctx, p.db); err != nil {
		permit.Drop()
		return err
	}
	permit.Record()
	return nil
}
