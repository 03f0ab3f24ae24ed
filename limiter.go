package gated

import (
	"context"

	"github.com/gatedsql/gated/internal/limiter"
)

// gate_concurrent=auto's limit lives in internal/limiter; the gate holds one per auto gate
// (gate.lim) and feeds it in releaseSample. These names keep the binding's code short.

type outcome = limiter.Outcome

const (
	outcomeOK       = limiter.OK
	outcomeFailed   = limiter.Failed
	outcomeOverload = limiter.Overload
)

// outcomeOf classifies the error that ended an operation run under ctx (limiter.OutcomeOf).
func outcomeOf(ctx context.Context, err error) outcome { return limiter.OutcomeOf(ctx, err) }
