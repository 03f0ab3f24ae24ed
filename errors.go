package gated

import (
	"database/sql/driver"
	"errors"
)

// ErrAdmissionFull is returned when an operation finds every admission permit of its gate taken
// (B running and Q waiting). It is returned at once, before the operation waits for anything, and
// the operation holds no permit afterwards. Callers usually answer it with HTTP 503.
var ErrAdmissionFull = errors.New("gated: admission full: too many operations running and waiting")

// ErrAdmissionTimeout is returned when an admitted operation waited gate_queue_wait for an
// execution permit without getting one, when gate_queue_wait is 0 and no permit was free, or
// when gate_queue_order=adaptive refused it sooner, shedding a standing queue. The admission
// permit has been returned when the caller sees it.
var ErrAdmissionTimeout = errors.New("gated: timed out waiting for an execution permit")

// ErrAdmissionDisplaced is returned to an admitted operation that was waiting for an execution
// permit when an arrival it must give way to took its place in a full gate: an arrival of a
// higher priority ([WithPriority]), or of a tenant with fewer waiters ([WithTenant]). The
// displaced operation is always the newest waiter of the priority or tenant that gives way, and
// holds nothing when the caller sees the error. Callers answer it like [ErrAdmissionFull].
var ErrAdmissionDisplaced = errors.New("gated: displaced from the queue by a caller of higher priority or of a tenant with fewer waiters")

// ErrCommitUnknown is returned by Commit when the COMMIT may have reached the server and no answer
// came back: the transaction may or may not have been committed, so check before you retry.
// With pgx and lib/pq gated counts the bytes written to the connection's socket, so it appears
// exactly when COMMIT left the process and the connection was lost before the server's answer
// (or with a 57P01-class error, which a backend terminated during synchronous replication sends
// after it committed locally); never when the connection was dead before COMMIT was sent, or
// when the server answered with an error. With other drivers it appears when the connection is
// no longer valid, the server gave no error and the driver did not report driver.ErrBadConn. It
// wraps the driver's error. The physical connection is discarded.
var ErrCommitUnknown = errors.New("gated: commit outcome unknown: connection lost during commit")

// ErrWaitCanceled is wrapped, together with the context's error, by the error of an operation
// whose context ended before it got an execution permit: while it waited, or before it asked.
// Such an operation is counted in [Stats].Canceled and holds nothing. errors.Is(err,
// context.DeadlineExceeded) or context.Canceled tells which way the context ended.
var ErrWaitCanceled = errors.New("gated: the context ended before an execution permit was granted")

// ErrClosed is returned by operations that need the gate after the Connector was closed.
var ErrClosed = errors.New("gated: connector is closed")

// IsRejected reports whether err means the gate refused an operation under load
// ([ErrAdmissionFull], [ErrAdmissionTimeout] or [ErrAdmissionDisplaced]). A context's error is
// not a rejection.
func IsRejected(err error) bool {
	return errors.Is(err, ErrAdmissionFull) || errors.Is(err, ErrAdmissionTimeout) || errors.Is(err, ErrAdmissionDisplaced)
}

// A RejectReason says why a gate refused an operation.
type RejectReason uint8

// The reasons of a [RejectedError].
const (
	// RejectFull: every admission permit of the gate was taken (B running and Q waiting);
	// refused at once. The error wraps [ErrAdmissionFull].
	RejectFull RejectReason = iota + 1
	// RejectTimeout: no execution permit came within gate_queue_wait (at once when it is 0,
	// or sooner when gate_queue_order=adaptive sheds a standing queue). The error wraps
	// [ErrAdmissionTimeout].
	RejectTimeout
	// RejectDisplaced: the operation waited for an execution permit and gave its place to an
	// arrival of a higher priority or of a tenant with fewer waiters. The error wraps
	// [ErrAdmissionDisplaced].
	RejectDisplaced
)

// String returns "full", "timeout" or "displaced", the reason label of gatedprom's and gatedotel's
// rejection counters.
func (r RejectReason) String() string {
	switch r {
	case RejectFull:
		return "full"
	case RejectTimeout:
		return "timeout"
	case RejectDisplaced:
		return "displaced"
	}
	return "unknown"
}

// A RejectedError is the error of an operation that a gate refused under load: it says which
// workload's gate refused and why. It wraps [ErrAdmissionFull], [ErrAdmissionTimeout] or
// [ErrAdmissionDisplaced], so errors.Is and [IsRejected] match it as they match those
// sentinels; use errors.As to read the workload, for example to answer with the Retry-After of
// that workload's gate (gatedhttp's Rejecter does). Each gate returns the same three values
// every time, so a refusal allocates nothing: do not modify one.
type RejectedError struct {
	Workload string       // the refusing gate's workload: "default" for gate_concurrent's, or a gate_workloads name
	Reason   RejectReason // RejectFull, RejectTimeout or RejectDisplaced
	msg      string
}

// newRejectedError returns the refusal of workload's gate for reason, its message built once.
func newRejectedError(workload string, reason RejectReason) *RejectedError {
	return &RejectedError{Workload: workload, Reason: reason, msg: rejectionSentinel(reason).Error() + " (workload " + workload + ")"}
}

func rejectionSentinel(r RejectReason) error {
	switch r {
	case RejectFull:
		return ErrAdmissionFull
	case RejectDisplaced:
		return ErrAdmissionDisplaced
	}
	return ErrAdmissionTimeout
}

// Error returns the sentinel's message with the workload, such as
// "gated: admission full: too many operations running and waiting (workload batch)".
func (e *RejectedError) Error() string {
	if e.msg == "" {
		return rejectionSentinel(e.Reason).Error() + " (workload " + e.Workload + ")"
	}
	return e.msg
}

// Unwrap returns [ErrAdmissionFull], [ErrAdmissionTimeout] or [ErrAdmissionDisplaced], by Reason.
func (e *RejectedError) Unwrap() error { return rejectionSentinel(e.Reason) }

// DSNError reports a DSN key, or a [Config] field set in code, that gated cannot use. Key is the
// DSN key (for example "gate_concurrent"); it is empty when the DSN as a whole is malformed. The
// message never contains the DSN itself, so it cannot leak a password.
type DSNError struct {
	Key string
	Err error
}

func (e *DSNError) Error() string {
	if e.Key == "" {
		return "gated: invalid DSN: " + e.Err.Error()
	}
	return "gated: DSN key " + e.Key + ": " + e.Err.Error()
}

func (e *DSNError) Unwrap() error { return e.Err }

// badConnHidden carries a driver error that wraps driver.ErrBadConn without letting errors.Is see
// that sentinel (I6): database/sql retries ErrBadConn, which would make it re-enter the gate while
// this operation's permit is still held. errors.As and errors.Is for every other target still reach
// the driver's error.
type badConnHidden struct{ err error }

func (e badConnHidden) Error() string { return e.err.Error() }

func (e badConnHidden) Is(target error) bool {
	return target != driver.ErrBadConn && errors.Is(e.err, target)
}

func (e badConnHidden) As(target any) bool { return errors.As(e.err, target) }

// hideBadConn returns err unchanged unless it matches driver.ErrBadConn.
func hideBadConn(err error) error {
	if err == nil || !errors.Is(err, driver.ErrBadConn) {
		return err
	}
	return badConnHidden{err}
}
