package fleet

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// A Record is one instance of a fleet as the fleet's table records it.
type Record struct {
	ID         int32         // the member's id in the table
	Info       string        // the instance's host and process id
	Joined     time.Time     // when it joined, by the database's clock
	LeaseLeft  time.Duration // until its lease expires by the database's clock; negative once expired
	Live       bool          // counted in the fleet: lease not expired, or its lease connection still holds its lock
	Conns      int           // its declared share of gate_max_conns, its working connections; its lease connection is one more (0: joining, fenced or without a seat)
	Concurrent []int         // its declared share of each gate's B: the default workload's first, then gate_workloads'
	Queue      []int         // its declared share of each gate's Q
	TotalConns int           // the gate_max_conns it was configured with
}

// Read returns the members of the fleet name in table (a name ValidTable accepts), live or not,
// in the order they joined, read with db: what each has declared. It changes nothing; db needs
// only to read the table. It returns an error wrapping the server's when the table does not
// exist.
func Read(ctx context.Context, db *sql.DB, name, table string) ([]Record, error) {
	rows, err := db.QueryContext(ctx, `SELECT member, info, joined, extract(epoch FROM expires - clock_timestamp()),
		`+table+`_live($2, member, expires, clock_timestamp()), conns,
		array_to_string(concurrent, ','), array_to_string(queue, ','), total_conns
		FROM `+table+` WHERE fleet = $1 ORDER BY joined, member`, name, int64(Key(name)))
	if err != nil {
		return nil, fmt.Errorf("gated: fleet: reading %s: %w", table, err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var m Record
		var left float64
		var b, q string
		if err := rows.Scan(&m.ID, &m.Info, &m.Joined, &left, &m.Live, &m.Conns, &b, &q, &m.TotalConns); err != nil {
			return nil, fmt.Errorf("gated: fleet: reading %s: %w", table, err)
		}
		m.LeaseLeft = time.Duration(left * float64(time.Second))
		if m.Concurrent, err = ParseInts(b); err == nil {
			m.Queue, err = ParseInts(q)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("gated: fleet: reading %s: %w", table, err)
	}
	return out, nil
}
