package gated

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A Workload is a named gate beside the default one (gate_workloads), with budgets of its own:
// a batch job or a report given its own Workload cannot take the execution permits that
// interactive requests need, and they cannot take its. Budgets are hard unless a workload
// lends: a gate never runs more than its Concurrent operations on permits of its own, and only
// the permits a lending workload leaves idle serve other gates' waiters (see Lend).
//
// As in a Config, a zero Queue or QueueWait means the default, the workload's Concurrent and the
// Config's QueueWait, as in gate_workloads; [None] means no queue, or no wait.
type Workload struct {
	// Name chooses the workload in [WithWorkload]: letters, digits, '_', '-' and '.', unique,
	// not "default".
	Name string
	// Concurrent is the workload's B, at least 1.
	Concurrent int
	// Queue is the workload's Q (default Concurrent; None: no queue).
	Queue int
	// QueueWait is the longest an operation of the workload waits for an execution permit
	// (default the Config's QueueWait; None: try once).
	QueueWait time.Duration
	// Auto makes Concurrent the workload's ceiling: its limit moves between
	// Config.ConcurrentMin and Concurrent from the service times of its operations, as
	// gate_concurrent=auto does for the default gate (DSN: the option "auto").
	Auto bool
	// Lend lets the workload's idle execution permits serve the waiters of the gates that do
	// not lend, within the sum of all B; each comes back when the operation that borrowed it
	// ends, never by preemption, so an operation of the workload waits at most for one borrowed
	// operation to end, and nobody waits for a physical connection (DSN: the option "lend").
	Lend bool
}

// ErrUnknownWorkload is wrapped by the error of an operation whose context names (with
// [WithWorkload]) a workload the Connector was not configured with. The operation fails at once
// and holds nothing: it is never run under another workload's budget.
var ErrUnknownWorkload = errors.New("gated: unknown workload")

// workloadKey is the context key under which WithWorkload stores a workload's name.
type workloadKey struct{}

// WithWorkload returns a copy of ctx that names the workload whose gate admits the operations run
// under it. The gate is chosen by the context of the first operation on a connection (BeginTx,
// or the first statement of a pinned *sql.Conn) and kept until database/sql takes the connection
// back, so every statement of a transaction runs under the workload that began it. An empty name
// and "default" mean the default gate; a name the Connector does not know makes the operation
// fail with [ErrUnknownWorkload]. It does no I/O and is safe for concurrent use.
func WithWorkload(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, workloadKey{}, name)
}

// workloadFrom returns the workload named in ctx by WithWorkload, or "" for the default gate.
func workloadFrom(ctx context.Context) string {
	name, _ := ctx.Value(workloadKey{}).(string)
	return name
}

// gateFor returns the gate of the workload ctx names.
func (c *Connector) gateFor(ctx context.Context) (*gate, error) {
	name := workloadFrom(ctx)
	if name == "" || name == DefaultWorkload {
		return c.gate, nil
	}
	if g := c.gates[name]; g != nil {
		return g, nil
	}
	return nil, fmt.Errorf("%w %q (configured: %s)", ErrUnknownWorkload, name, strings.Join(c.Workloads(), ", "))
}

// Workloads returns the names of the Connector's gates: "default" first, then the configured
// workloads in the order they were given. Safe for concurrent use.
func (c *Connector) Workloads() []string {
	names := make([]string, 0, 1+len(c.cfg.Workloads))
	names = append(names, DefaultWorkload)
	for _, w := range c.cfg.Workloads {
		names = append(names, w.Name)
	}
	return names
}

// WorkloadStats returns a snapshot of the named workload's gate ("" or "default" for the
// default gate) with the shared physical pool in Pool, and false when the Connector has no such
// workload. Connectors sharing a gate_name report the same gates. Safe for concurrent use.
func (c *Connector) WorkloadStats(name string) (Stats, bool) {
	g := c.gate
	if name != "" && name != DefaultWorkload {
		if g = c.gates[name]; g == nil {
			return Stats{}, false
		}
	}
	return c.snapshot(g, c.poolSnapshot()), true
}
