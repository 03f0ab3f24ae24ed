// Command quickstart serves GET /answer from PostgreSQL through a gate, and answers 503 when the
// gate refuses the query instead of letting requests pile up in front of the pool.
package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/gatedsql/gated" // registers the driver "gated"; pgx v5 is the default inner driver
	"github.com/gatedsql/gated/gatedhttp"
)

// At most 24 physical connections, 16 operations using the database, 8 waiting (each for at most
// 20 ms): the 25th concurrent operation is refused at once.
const dsn = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" +
	"&gate_max_conns=24&gate_concurrent=16&gate_queue=8&gate_queue_wait=20ms"

func main() {
	db, err := gated.Open(dsn) // sql.Open("gated", dsn) plus the *sql.DB settings the gate needs
	if err != nil {
		log.Fatal(err)
	}

	c, _ := gated.FromDB(db)
	rj := gatedhttp.NewRejecter(c) // answers refusals with 503 and a Retry-After from the gate

	http.HandleFunc("GET /answer", func(w http.ResponseWriter, r *http.Request) {
		var answer int
		err := db.QueryRowContext(r.Context(), "SELECT 42").Scan(&answer)
		if rj.WriteRejection(w, err) { // the gate refused: ErrAdmissionFull, ErrAdmissionTimeout or ErrAdmissionDisplaced
			return
		}
		if err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, answer)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
