package gatedhttp

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatedsql/gated"
	"github.com/gatedsql/gated/internal/pgtest"
)

// A 503 from a gated service does not prove that nothing ran: this handler commits a row, and
// only its next query is refused (its own transaction holds the gate's one permit, and there is
// no queue). The retry transport replays only what net/http itself would replay: an idempotent
// method, or a request that carries an Idempotency-Key. A POST that committed once stays
// committed once, and its client gets the 503.
func TestRetryTransportDoesNotReplayACommittedPost(t *testing.T) {
	base := pgtest.URL(t)
	adm, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	table := fmt.Sprintf("gatedhttp_replay_%d", time.Now().UnixNano()%1e9)
	if _, err := adm.Exec("CREATE TABLE " + table + " (x int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Exec("DROP TABLE IF EXISTS " + table) })

	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("gate_max_conns", "1")
	q.Set("gate_concurrent", "1")
	q.Set("gate_queue", "0")
	u.RawQuery = q.Encode()
	db, err := gated.Open(u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, _ := gated.FromDB(db)
	rj := NewRejecter(c)

	var handled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		ctx := r.Context()
		if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1)"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		held, err := db.BeginTx(ctx, nil) // the gate's only permit
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer held.Rollback()
		_, err = db.ExecContext(ctx, "SELECT 1")
		if rj.WriteRejection(w, err) {
			return
		}
		http.Error(w, fmt.Sprintf("the second query was not refused: %v", err), http.StatusInternalServerError)
	}))
	defer srv.Close()
	client := &http.Client{Transport: newRetryTransport(t, srv.Client().Transport, RetryOptions{MaxAttempts: 2})}
	defer client.CloseIdleConnections()

	for _, tc := range []struct {
		name     string
		method   string
		key      string // Idempotency-Key header name, "" for none
		attempts int64
	}{
		{"POST", http.MethodPost, "", 1},
		{"POST with Idempotency-Key", http.MethodPost, "Idempotency-Key", 2},
		{"POST with X-Idempotency-Key", http.MethodPost, "X-Idempotency-Key", 2},
		{"GET", http.MethodGet, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := adm.Exec("TRUNCATE " + table); err != nil {
				t.Fatal(err)
			}
			handled.Store(0)
			var body io.Reader
			if tc.method == http.MethodPost {
				body = strings.NewReader("x=1") // http.NewRequest sets GetBody
			}
			req, err := http.NewRequestWithContext(context.Background(), tc.method, srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.key != "" {
				req.Header.Set(tc.key, "order-42")
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("status %d (%s), want the handler's 503", resp.StatusCode, b)
			}
			if got := handled.Load(); got != tc.attempts {
				t.Errorf("the handler ran %d times, want %d", got, tc.attempts)
			}
			var rows int64
			if err := adm.QueryRow("SELECT count(*) FROM " + table).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != tc.attempts {
				t.Errorf("%d rows committed, want %d (one per attempt the client allowed)", rows, tc.attempts)
			}
		})
	}
}
