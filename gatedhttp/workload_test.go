package gatedhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// recordWorkloads replaces withWorkload for the test and returns the names it was called with.
func recordWorkloads(t *testing.T) func() []string {
	var mu sync.Mutex
	var names []string
	orig := withWorkload
	withWorkload = func(ctx context.Context, name string) context.Context {
		mu.Lock()
		names = append(names, name)
		mu.Unlock()
		return orig(ctx, name)
	}
	t.Cleanup(func() { withWorkload = orig })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), names...)
	}
}

type ctxKey struct{}

// TestWorkloadNamesTheRoutesWorkload serves three routes: one wrapped with Workload, one chosen
// by WorkloadFunc from the mux's pattern, one left to the default gate. Each request's context
// reaches the handler derived from the request's own (a value set before survives).
func TestWorkloadNamesTheRoutesWorkload(t *testing.T) {
	seen := recordWorkloads(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(ctxKey{}) != "outer" {
			t.Errorf("%s: the request's own context was lost", r.URL.Path)
		}
	})
	mux := http.NewServeMux()
	mux.Handle("GET /reports/{id}", Workload("reports", ok))
	mux.Handle("POST /orders", ok)
	mux.Handle("GET /health", ok)
	byRoute := map[string]string{"POST /orders": "checkout"}
	h := WorkloadFunc(func(r *http.Request) string {
		_, pattern := mux.Handler(r)
		return byRoute[pattern]
	}, mux)

	for _, tc := range []struct {
		method, path string
		want         []string
	}{
		{"GET", "/reports/7", []string{"reports"}},
		{"POST", "/orders", []string{"checkout"}},
		{"GET", "/health", nil},
	} {
		before := len(seen())
		req := httptest.NewRequest(tc.method, tc.path, nil)
		req = req.WithContext(context.WithValue(req.Context(), ctxKey{}, "outer"))
		h.ServeHTTP(httptest.NewRecorder(), req)
		got := seen()[before:]
		if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
			t.Errorf("%s %s: workloads set %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}
