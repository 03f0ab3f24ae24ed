package gatedhttp

import (
	"context"
	"net/http"

	"github.com/gatedsql/gated"
)

// withTenant and withPriority are gated.WithTenant and gated.WithPriority; the tests replace
// them to see what a request got.
var (
	withTenant   = gated.WithTenant
	withPriority = gated.WithPriority
)

// Tenant returns a handler that serves every request with next, under a context whose database
// operations belong to tenant key (gated.WithTenant): inside each workload's gate, the tenants'
// waiters are served in turn, and when the gate is full an arrival of a tenant with fewer
// waiters may displace the newest waiter of the tenant with the most. Wrap the routes that one
// customer or partner calls:
//
//	mux.Handle("POST /partners/acme/orders", gatedhttp.Tenant("acme", orders))
//
// The request keeps its workload and priority: Tenant, [Workload] and [Priority] compose in any
// order.
func Tenant(key string, next http.Handler) http.Handler {
	return serveWith(next, func(r *http.Request) context.Context { return withTenant(r.Context(), key) })
}

// TenantFunc is like [Tenant] with the key chosen per request by choose; an empty key leaves the
// request's context as it is (the tenant an outer handler set, or else the one tenant of all
// callers without one). choose is called once per request, concurrently. To take the key from
// a request header:
//
//	h := gatedhttp.TenantFunc(func(r *http.Request) string {
//		return r.Header.Get("X-Tenant")
//	}, mux)
//
// A key from a header is whatever the client sends: a client can take another tenant's key, or
// spread its requests over many keys, and get more than its share. When fairness matters, take
// the key from an identity the server has authenticated, such as the owner of the request's API
// key:
//
//	h := gatedhttp.TenantFunc(func(r *http.Request) string {
//		return apiKeys.Owner(r.Header.Get("Authorization")) // "" for a key it does not know
//	}, mux)
func TenantFunc(choose func(*http.Request) string, next http.Handler) http.Handler {
	return serveWith(next, func(r *http.Request) context.Context {
		if key := choose(r); key != "" {
			return withTenant(r.Context(), key)
		}
		return nil
	})
}

// Priority returns a handler that serves every request with next, under a context whose
// database operations wait with priority p (gated.WithPriority): in each gate, every waiter of
// a higher priority is served before any of a lower one, and when the gate is full an arrival of
// a higher priority displaces the newest waiter of the lowest priority waiting, which gets
// gated.ErrAdmissionDisplaced ([WriteRejection] answers it with 503). Wrap the routes that must
// go first, or those that can wait:
//
//	mux.Handle("POST /checkout", gatedhttp.Priority(gated.PriorityHigh, checkout))
//	mux.Handle("GET /exports/{id}", gatedhttp.Priority(gated.PriorityLow, exports))
//
// The request keeps its workload and tenant: Priority, [Workload] and [Tenant] compose in any
// order.
func Priority(p gated.Priority, next http.Handler) http.Handler {
	return serveWith(next, func(r *http.Request) context.Context { return withPriority(r.Context(), p) })
}

// PriorityFunc is like [Priority] with the priority chosen per request by choose, which is
// called once per request, concurrently. What it returns replaces the priority the request's
// context carried, gated.PriorityNormal (the default) included, so a handler nested inside
// decides over one outside. To let clients mark their own requests as background work, without
// letting any of them go first:
//
//	h := gatedhttp.PriorityFunc(func(r *http.Request) gated.Priority {
//		if r.Header.Get("X-Background") == "1" {
//			return gated.PriorityLow
//		}
//		return gated.PriorityNormal
//	}, mux)
//
// Like a tenant key, a priority read from a request is whatever the client sends: raise one
// only for an identity the server has authenticated, such as the owner of an API key.
func PriorityFunc(choose func(*http.Request) gated.Priority, next http.Handler) http.Handler {
	return serveWith(next, func(r *http.Request) context.Context { return withPriority(r.Context(), choose(r)) })
}
