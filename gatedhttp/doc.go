// Package gatedhttp carries gated's refusals across HTTP: a server answers them with 503 and a
// Retry-After, and a client retries 503 and 429 only within a retry budget, so that retries do not
// multiply the overload the gate has just refused.
//
// On the server:
//
//	c, _ := gated.FromDB(db)
//	rj := gatedhttp.NewRejecter(c)
//	mux.Handle("GET /report", gatedhttp.Workload("reports", reportHandler))
//	...
//	if err != nil {
//		if rj.WriteRejection(w, err) {
//			return // 503, Retry-After estimated from the gate that refused (the "reports" one here)
//		}
//		http.Error(w, "internal error", http.StatusInternalServerError)
//	}
//
// On the client:
//
//	client := &http.Client{Transport: gatedhttp.NewRetryTransport(nil, gatedhttp.RetryOptions{})}
//
// The package uses only the standard library and gated's root package.
package gatedhttp
