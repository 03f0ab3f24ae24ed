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
// Middleware sets what the gate reads from a request's context: [Workload] and [WorkloadFunc]
// the workload whose gate admits its operations, [Tenant] and [TenantFunc] the tenant they
// belong to (tenants share a gate fairly), [Priority] and [PriorityFunc] the priority they wait
// with. WriteRejection and a Rejecter answer a refusal of any kind with 503, that of a waiter
// displaced by another tenant or a higher priority included.
//
// On the client:
//
//	rt, err := gatedhttp.NewRetryTransport(nil, gatedhttp.RetryOptions{}) // err names a field out of range
//	...
//	client := &http.Client{Transport: rt}
//
// # What the client replays
//
// A 503 from a gated service does not prove that nothing ran: a handler may have committed a
// write before its next query was refused. The retry transport therefore replays only what
// net/http itself replays on a new connection: requests with an idempotent method (GET, HEAD,
// OPTIONS, TRACE), and requests of any method that carry an Idempotency-Key or X-Idempotency-Key
// header, and only when the body can be sent again (no body, http.NoBody, or GetBody). A POST
// with GetBody but no key is sent once, and its caller gets the 503. To make a write retryable,
// send a key the server uses to do the work once:
//
//	req.Header.Set("Idempotency-Key", orderID)
//
// The package uses only the standard library and gated's root package.
package gatedhttp
