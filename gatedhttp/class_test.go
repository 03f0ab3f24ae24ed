package gatedhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/gatedsql/gated"
)

// The keys under which recordClasses marks a context with the tenant and priority it was given.
type (
	tenantSeen   struct{}
	prioritySeen struct{}
)

// recordClasses replaces withTenant and withPriority for the test: each still sets the class
// with gated's function, and also marks the context it returns with what it set, so that a
// handler can read the tenant and priority its request's context carries (the innermost setting
// wins, as in gated).
func recordClasses(t *testing.T) {
	origT, origP := withTenant, withPriority
	withTenant = func(ctx context.Context, key string) context.Context {
		return context.WithValue(origT(ctx, key), tenantSeen{}, key)
	}
	withPriority = func(ctx context.Context, p gated.Priority) context.Context {
		return context.WithValue(origP(ctx, p), prioritySeen{}, p)
	}
	t.Cleanup(func() { withTenant, withPriority = origT, origP })
}

// class is what a handler saw of its request's context.
type class struct {
	tenant      string
	hasTenant   bool
	priority    gated.Priority
	hasPriority bool
	outer       bool // the value the request's own context carried survived
}

// classOf reads what recordClasses marked ctx with.
func classOf(ctx context.Context) class {
	var c class
	c.tenant, c.hasTenant = ctx.Value(tenantSeen{}).(string)
	c.priority, c.hasPriority = ctx.Value(prioritySeen{}).(gated.Priority)
	c.outer = ctx.Value(ctxKey{}) == "outer"
	return c
}

// serve sends one request through h, with a value in its context and the headers given (name,
// value, ...), and returns what the innermost handler saw.
func serve(t *testing.T, h func(next http.Handler) http.Handler, method, path string, header ...string) class {
	t.Helper()
	var got class
	var calls atomic.Int64
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		got = classOf(r.Context())
	})
	req := httptest.NewRequest(method, path, nil)
	req = req.WithContext(context.WithValue(req.Context(), ctxKey{}, "outer"))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	h(inner).ServeHTTP(httptest.NewRecorder(), req)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%s %s: the handler was called %d times", method, path, n)
	}
	return got
}

// TestTenantSetsTheRequestsTenant: Tenant gives every request its key; TenantFunc the key its
// choose returns for that request, and leaves the context alone when that is empty. The
// request's own context reaches the handler in every case.
func TestTenantSetsTheRequestsTenant(t *testing.T) {
	recordClasses(t)
	var chosen atomic.Int64
	fromHeader := func(next http.Handler) http.Handler {
		return TenantFunc(func(r *http.Request) string {
			chosen.Add(1)
			return r.Header.Get("X-Tenant")
		}, next)
	}
	acme := func(next http.Handler) http.Handler { return Tenant("acme", next) }

	for _, tc := range []struct {
		name   string
		h      func(http.Handler) http.Handler
		header []string
		want   string // "" for no tenant set
	}{
		{"route", acme, nil, "acme"},
		{"route with a header", acme, []string{"X-Tenant", "other"}, "acme"},
		{"header", fromHeader, []string{"X-Tenant", "t1"}, "t1"},
		{"no header", fromHeader, nil, ""},
		{"empty header", fromHeader, []string{"X-Tenant", ""}, ""},
		{"header inside the route", func(next http.Handler) http.Handler { return acme(fromHeader(next)) }, []string{"X-Tenant", "t2"}, "t2"},
		{"no header inside the route", func(next http.Handler) http.Handler { return acme(fromHeader(next)) }, nil, "acme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serve(t, tc.h, "GET", "/orders", tc.header...)
			if !got.outer {
				t.Error("the request's own context was lost")
			}
			if got.hasTenant != (tc.want != "") || got.tenant != tc.want {
				t.Errorf("tenant %q (set: %v), want %q", got.tenant, got.hasTenant, tc.want)
			}
			if got.hasPriority {
				t.Errorf("priority %v set by a tenant middleware", got.priority)
			}
		})
	}
	if n := chosen.Load(); n != 5 {
		t.Errorf("TenantFunc's choose called %d times for 5 requests", n)
	}
}

// TestPrioritySetsTheRequestsPriority: Priority gives every request its priority; PriorityFunc
// the one its choose returns for that request, PriorityNormal included, replacing one set
// outside it.
func TestPrioritySetsTheRequestsPriority(t *testing.T) {
	recordClasses(t)
	var chosen atomic.Int64
	background := func(next http.Handler) http.Handler {
		return PriorityFunc(func(r *http.Request) gated.Priority {
			chosen.Add(1)
			if r.Header.Get("X-Background") == "1" {
				return gated.PriorityLow
			}
			return gated.PriorityNormal
		}, next)
	}
	high := func(next http.Handler) http.Handler { return Priority(gated.PriorityHigh, next) }

	for _, tc := range []struct {
		name   string
		h      func(http.Handler) http.Handler
		header []string
		want   gated.Priority
	}{
		{"high route", high, nil, gated.PriorityHigh},
		{"low route", func(next http.Handler) http.Handler { return Priority(gated.PriorityLow, next) }, nil, gated.PriorityLow},
		{"background header", background, []string{"X-Background", "1"}, gated.PriorityLow},
		{"no header", background, nil, gated.PriorityNormal},
		{"header inside a high route", func(next http.Handler) http.Handler { return high(background(next)) }, []string{"X-Background", "1"}, gated.PriorityLow},
		{"high route inside the header's", func(next http.Handler) http.Handler { return background(high(next)) }, []string{"X-Background", "1"}, gated.PriorityHigh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serve(t, tc.h, "POST", "/checkout", tc.header...)
			if !got.outer {
				t.Error("the request's own context was lost")
			}
			if !got.hasPriority || got.priority != tc.want {
				t.Errorf("priority %v (set: %v), want %v", got.priority, got.hasPriority, tc.want)
			}
			if got.hasTenant {
				t.Errorf("tenant %q set by a priority middleware", got.tenant)
			}
		})
	}
	if n := chosen.Load(); n != 4 {
		t.Errorf("PriorityFunc's choose called %d times for 4 requests", n)
	}
}

// TestClassMiddlewareComposesWithWorkload: a route wrapped with Workload, Tenant and Priority
// in either order gets all three.
func TestClassMiddlewareComposesWithWorkload(t *testing.T) {
	recordClasses(t)
	seen := recordWorkloads(t)
	for _, tc := range []struct {
		name string
		h    func(http.Handler) http.Handler
	}{
		{"workload outside", func(next http.Handler) http.Handler {
			return Workload("reports", Tenant("acme", Priority(gated.PriorityLow, next)))
		}},
		{"workload inside", func(next http.Handler) http.Handler {
			return Priority(gated.PriorityLow, Tenant("acme", Workload("reports", next)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(seen())
			got := serve(t, tc.h, "GET", "/reports/7")
			if !got.outer || got.tenant != "acme" || got.priority != gated.PriorityLow || !got.hasPriority {
				t.Errorf("handler saw %+v, want tenant acme, priority low and the request's own context", got)
			}
			if w := seen()[before:]; len(w) != 1 || w[0] != "reports" {
				t.Errorf("workloads set %q, want [reports]", w)
			}
		})
	}
}
