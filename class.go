package gated

import "context"

// Who goes first inside one gate: the tenant and the priority a caller's context carries. The
// gate reads them only when an operation must wait, or finds admission full while someone waits
// (only a waiter can give way); an operation that finds a permit free with nobody waiting never
// looks (gate.go, internal/fairq).

// A Priority orders the waiters of one gate: every waiter of a higher priority is served before
// any of a lower one, and when admission is full an arrival of a higher priority displaces the
// newest waiter of the lowest priority waiting below it. A running operation is never
// interrupted. Under sustained overload of a higher priority, a lower one can starve: that is
// what it is for. Set it with [WithPriority]; a context without one is [PriorityNormal].
type Priority int8

// The priorities, lowest first.
const (
	PriorityLow    Priority = -1
	PriorityNormal Priority = 0 // the default
	PriorityHigh   Priority = 1
)

// String returns "low", "normal" or "high".
func (p Priority) String() string {
	switch p.clamp() {
	case PriorityLow:
		return "low"
	case PriorityHigh:
		return "high"
	}
	return "normal"
}

// clamp maps a value outside PriorityLow..PriorityHigh to the nearest of them.
func (p Priority) clamp() Priority { return min(max(p, PriorityLow), PriorityHigh) }

// callClass is what WithTenant and WithPriority store in a context, under one key so that the
// gate reads both with one lookup and setting one keeps the other.
type callClass struct {
	tenant string
	prio   Priority
}

type classKey struct{}

// level is c's priority as a level of internal/fairq: 0 for PriorityLow up to 2 for PriorityHigh.
func (c callClass) level() int { return int(c.prio - PriorityLow) }

// classFrom returns the tenant and priority ctx carries (the zero callClass when none).
func classFrom(ctx context.Context) callClass {
	c, _ := ctx.Value(classKey{}).(callClass)
	return c
}

// WithTenant returns a copy of ctx whose operations belong to tenant key. Inside a workload, the
// callers' tenants share its execution permits and its queue fairly:
//
//   - Waiters are served round-robin across tenants, first in, first out within one; a tenant
//     that had nobody waiting is served before those that had (so a tenant that wants less than
//     its share gets all it wants), and a lone tenant may use every permit: none idles while
//     anyone waits.
//   - When admission is full, an arrival of a tenant with fewer waiters than another, by two or
//     more, displaces the newest waiter of the tenant with the most ([ErrAdmissionDisplaced]);
//     otherwise the arrival is refused ([ErrAdmissionFull]).
//
// Callers without a tenant, and those with the empty key, form one tenant of their own. The key
// is compared as it is; the gate keeps it only while an operation of the tenant waits, so the
// number of distinct keys over a run costs nothing. Priority ([WithPriority]) comes before
// tenants: fairness holds among waiters of one priority. It does no I/O and is safe for
// concurrent use.
func WithTenant(ctx context.Context, key string) context.Context {
	c := classFrom(ctx)
	c.tenant = key
	return context.WithValue(ctx, classKey{}, c)
}

// WithPriority returns a copy of ctx whose operations wait with priority p (see [Priority]);
// a value beyond PriorityLow or PriorityHigh counts as the nearest of them. Like the workload,
// the tenant and priority of a transaction or a pinned *sql.Conn are those of the context of its
// first operation: the permit taken then is held to its end. It does no I/O and is safe for
// concurrent use.
func WithPriority(ctx context.Context, p Priority) context.Context {
	c := classFrom(ctx)
	c.prio = p.clamp()
	return context.WithValue(ctx, classKey{}, c)
}
