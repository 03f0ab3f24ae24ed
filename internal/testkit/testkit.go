// Package testkit holds test helpers that the root package's tests and the tests of nested
// modules share and that need neither a database server nor gated's types (the root package's
// own tests import this package, so it cannot import gated).
package testkit

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated/internal/dsn"
)

// An EndedContext reports its error before its Done channel closes, so a test can make a queued
// waiter's context end without waking the waiter: End makes Err return context.Canceled, Close
// closes Done.
type EndedContext struct {
	context.Context
	ended atomic.Bool
	done  chan struct{}
}

// NewEndedContext returns an EndedContext that has not ended, over context.Background.
func NewEndedContext() *EndedContext {
	return &EndedContext{Context: context.Background(), done: make(chan struct{})}
}

func (c *EndedContext) Done() <-chan struct{} { return c.done }

func (c *EndedContext) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return nil
}

// End makes Err report context.Canceled; Done stays open.
func (c *EndedContext) End() { c.ended.Store(true) }

// Close closes Done.
func (c *EndedContext) Close() { close(c.done) }

// isGateKey is the root package's test of a gate_ key: the prefix in any case.
var isGateKey = dsn.Prefixed("gate_")

// CheckDSNErrorSafe fails unless err, which ParseDSN or NewConnector returned for dsn, is what
// every DSN error must be whatever the input: it starts with "gated: ", the key it names (key:
// the Key of the *gated.DSNError that err wraps, "" for none) is a gate_ one (any other word of
// a broken DSN may be a password), and, when password is not "", it does not quote password.
// The DSN fuzz targets check their errors with it.
func CheckDSNErrorSafe(t *testing.T, dsn string, err error, key, password string) {
	t.Helper()
	if err == nil {
		return
	}
	if !strings.HasPrefix(err.Error(), "gated: ") {
		t.Fatalf("DSN %q: error %q does not start with \"gated: \"", dsn, err)
	}
	if key != "" && !isGateKey(key) {
		t.Fatalf("DSN %q: error names non-gate key %q", dsn, key)
	}
	if password != "" && strings.Contains(err.Error(), password) {
		t.Fatalf("DSN %q: error %q contains the password", dsn, err)
	}
}
