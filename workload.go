package gated

import "context"

// workloadKey is the context key under which WithWorkload stores a workload's name.
type workloadKey struct{}

// WithWorkload returns a copy of ctx that names the workload whose gate admits the operations run
// under it. The operation's gate is chosen by the context of its first operation on a connection
// (BeginTx, or the first statement of a pinned *sql.Conn), and kept until the connection is
// given back. An empty name means the default gate. It does no I/O and is safe for concurrent use.
func WithWorkload(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, workloadKey{}, name)
}

// workloadFrom returns the workload named in ctx by WithWorkload, or "" for the default gate.
func workloadFrom(ctx context.Context) string {
	name, _ := ctx.Value(workloadKey{}).(string)
	return name
}
