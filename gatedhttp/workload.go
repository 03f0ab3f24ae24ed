package gatedhttp

import (
	"context"
	"net/http"

	"github.com/gatedsql/gated"
)

// withWorkload is gated.WithWorkload; the tests replace it to see which name a request got.
var withWorkload = gated.WithWorkload

// Workload returns a handler that serves every request with next, under a context that names the
// workload whose gate admits the request's database operations (gated.WithWorkload). Wrap one
// route's handler with it:
//
//	mux.Handle("GET /reports/{id}", gatedhttp.Workload("reports", reports))
//
// The name must be one of the workloads configured on the gated *sql.DB the handler uses.
func Workload(name string, next http.Handler) http.Handler {
	return serveWith(next, func(r *http.Request) context.Context { return withWorkload(r.Context(), name) })
}

// WorkloadFunc is like [Workload] with the name chosen per request by choose; an empty name
// leaves the request's context as it is (the default gate). choose is called once per request,
// concurrently. To keep a table of routes in one place, look the pattern up in the mux it wraps:
//
//	byRoute := map[string]string{"GET /reports/{id}": "reports", "POST /orders": "checkout"}
//	h := gatedhttp.WorkloadFunc(func(r *http.Request) string {
//		_, pattern := mux.Handler(r)
//		return byRoute[pattern]
//	}, mux)
func WorkloadFunc(choose func(*http.Request) string, next http.Handler) http.Handler {
	return serveWith(next, func(r *http.Request) context.Context {
		if name := choose(r); name != "" {
			return withWorkload(r.Context(), name)
		}
		return nil
	})
}

// serveWith returns a handler that serves each request with next, under the context ctxFor
// returns for it, or under its own when ctxFor returns nil. Workload, Tenant, Priority and their
// Func forms are it.
func serveWith(next http.Handler, ctxFor func(*http.Request) context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ctx := ctxFor(r); ctx != nil {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}
