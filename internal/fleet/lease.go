package fleet

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// The SQL of gate_fleet=on: the fleet table, the function that refreshes a member's lease, and
// the statements that run it on the lease connection (conn.go). member.go decides what to ask
// for; this file only talks to the database.
//
// One row per member: its declared share (what it may hold at most), the totals it was configured
// with, when it joined and when its lease expires, both by the database's clock. A member is live
// while its lease has not expired or its session advisory lock (fleet key, member id) is held: a
// process that crashed loses the lock the moment its backend ends and its share comes back once
// the lease expires, while a member that is alive but slow, or a jump of the database's clock
// that makes every lease look expired, keeps its share counted for as long as its lease
// connection lives. The lock is the proof of life; the TTL only covers a member whose lease
// connection broke and which may still hold other connections. A lock is proof even without a
// row (the table truncated or made again, the row deleted): no grant counts as free while a
// member holds its lock without a row, and such a member declares its share again at its next
// refresh, since the others counted it all along.
//
// Every refresh is one statement, SELECT * FROM <table>_refresh(...), a PL/pgSQL function: it
// declares what the member holds now (always safe: a member declares less only after it has
// shrunk), and when the member asks for more it takes pg_advisory_xact_lock(fleet key, 0), reads
// the others' declarations from a snapshot taken after the lock (each statement of a VOLATILE
// function takes its own), and grants only what they leave free; the grant is committed before
// the member grows into it. Growth is therefore serialized, and the declared shares of the live
// members never add up to more than the totals. A dead row is never refreshed back to life: once
// the others may have counted its share as free, its member must join again from nothing. The
// first refresh on a new lease connection terminates the member's previous lease backend if the
// server still holds it open (a flow the network dropped).
//
// The refresh reports every row with how long its lease has left by the database's clock and
// whether its lock is held, so that a member sees a crashed member's lease (no lock, not yet
// expired) and refreshes when it expires. A member that expects such an expiry sends the others
// it expects live and what it wants in that fleet, which the function asks for instead of the
// usual want when the others live at its clock are exactly those: the refresh that finds the
// lease expired also grants the room it frees, under the same lock and from the same
// declarations as any grant.

// DefaultTable is gate_fleet_table's default.
const DefaultTable = "gated_fleet"

// tableName is what gate_fleet_table accepts: a lowercase identifier, optionally
// schema-qualified, short enough for "<name>_refresh" to stay within PostgreSQL's 63 bytes.
var tableName = regexp.MustCompile(`^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,54}$`)

// ValidTable reports whether table is a name gate_fleet_table accepts.
func ValidTable(table string) bool { return tableName.MatchString(table) }

// Key is the first key of the fleet's advisory locks: a hash of gate_name, positive so that
// it reads the same as pg_locks.classid (an oid).
func Key(name string) int32 {
	h := fnv.New32a()
	io.WriteString(h, name)
	return int32(h.Sum32() & 0x7fffffff)
}

// schema returns the statements that create the table and its functions, serialized under a
// transaction-level advisory lock so that instances starting together do not race, each statement
// ended by the server after timeout, in whole milliseconds (0: none).
func schema(table string, timeout time.Duration) string {
	return fmt.Sprintf(`BEGIN;
SET LOCAL statement_timeout = %[3]d;
SELECT pg_advisory_xact_lock(hashtext('gated_fleet_schema'));
DO $do$
BEGIN
IF to_regclass('%[1]s') IS NULL THEN
EXECUTE $ddl$CREATE TABLE %[1]s (
	fleet text NOT NULL,
	member int NOT NULL,
	joined timestamptz NOT NULL,
	expires timestamptz NOT NULL,
	conns int NOT NULL,
	concurrent int[] NOT NULL,
	queue int[] NOT NULL,
	total_conns int NOT NULL,
	total_concurrent int[] NOT NULL,
	total_queue int[] NOT NULL,
	info text NOT NULL DEFAULT '',
	PRIMARY KEY (fleet, member)
)$ddl$;
END IF;
IF to_regprocedure('%[1]s_live(int,int,timestamptz,timestamptz)') IS NULL THEN
EXECUTE $ddl$CREATE FUNCTION %[1]s_live(k int, m int, expires timestamptz, t timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
	SELECT expires > t OR EXISTS (
		SELECT 1 FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
		AND l.classid = k::oid AND l.objid = m::oid
		AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()))
$fn$$ddl$;
END IF;
IF to_regprocedure('%[2]s') IS NULL THEN
EXECUTE $ddl$CREATE FUNCTION %[1]s_refresh(
	f text, k int, m int, joining boolean, ttl interval, skew interval,
	have_c int, have_b int[], have_q int[],
	want_c int, want_b int[], want_q int[],
	tot_c int, tot_b int[], tot_q int[], note text, prev_pid int, prev_start timestamptz,
	after_live int[], after_c int, after_b int[], after_q int[], reclaim boolean)
RETURNS TABLE(r_member int, r_joined timestamptz, r_live boolean, r_conns int, r_concurrent text, r_queue text,
	r_total_conns int, r_total_concurrent text, r_total_queue text, r_info text, r_mine boolean,
	r_pid int, r_start timestamptz, r_left double precision, r_locked boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	t timestamptz := clock_timestamp() + skew;
	n int;
	locked boolean;
	held oid[];
	grant_c int;
	grant_b int[] := have_b;
	grant_q int[] := have_q;
	unseen boolean;
	oc int; ob int[]; oq int[];
	ec int; eb int[]; eq int[];
	me_start timestamptz := (SELECT a.backend_start FROM pg_stat_activity a WHERE a.pid = pg_backend_pid());
BEGIN
	IF prev_pid > 0 AND prev_pid <> pg_backend_pid() THEN
		-- The member's previous lease connection, given up after a timeout or a partition while
		-- the server may still hold it open: it would count one above the share until the
		-- server's TCP keepalive ended it.
		PERFORM pg_terminate_backend(a.pid) FROM pg_stat_activity a
			WHERE a.pid = prev_pid AND a.backend_start = prev_start AND a.usename = current_user;
	END IF;
	-- The members whose lease connection holds their lock, this one's among them or not.
	SELECT coalesce(array_agg(l.objid), '{}'), coalesce(bool_or(l.pid = pg_backend_pid() AND l.objid = m::oid), false)
		INTO held, locked
		FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = k::oid
		AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
	IF joining THEN
		-- A member id is the joiner's only if it holds its lock; the row of a dead member (expired,
		-- its lock free since the joiner holds it now) is taken over.
		IF NOT locked AND NOT pg_try_advisory_lock(k, m) THEN
			RETURN;
		END IF;
		INSERT INTO %[1]s AS r (fleet, member, joined, expires, conns, concurrent, queue,
			total_conns, total_concurrent, total_queue, info)
		VALUES (f, m, t, t + ttl, have_c, have_b, have_q, tot_c, tot_b, tot_q, note)
		ON CONFLICT (fleet, member) DO UPDATE SET joined = EXCLUDED.joined, expires = EXCLUDED.expires,
			conns = EXCLUDED.conns, concurrent = EXCLUDED.concurrent, queue = EXCLUDED.queue,
			total_conns = EXCLUDED.total_conns, total_concurrent = EXCLUDED.total_concurrent,
			total_queue = EXCLUDED.total_queue, info = EXCLUDED.info
		WHERE r.expires <= t;
		GET DIAGNOSTICS n = ROW_COUNT;
		IF n = 0 AND NOT locked THEN
			-- Another member's live row, whose lock was free: kept, the lock would count that row
			-- live for as long as this connection lives.
			PERFORM pg_advisory_unlock(k, m);
		END IF;
	ELSE
		-- Only a live row is refreshed: once the others may have counted a member's share as
		-- free, that member must join again from nothing.
		UPDATE %[1]s AS r SET expires = t + ttl, conns = have_c, concurrent = have_b, queue = have_q,
			total_conns = tot_c, total_concurrent = tot_b, total_queue = tot_q, info = note
		WHERE r.fleet = f AND r.member = m AND %[1]s_live(k, m, r.expires, t);
		GET DIAGNOSTICS n = ROW_COUNT;
		IF n = 0 AND reclaim AND locked THEN
			-- The row is gone (the table truncated or made again, the row deleted) while this
			-- connection held the member's lock all along: the others' grants counted the member
			-- meanwhile (see below), so what it holds is still its own, and it declares it again.
			INSERT INTO %[1]s (fleet, member, joined, expires, conns, concurrent, queue,
				total_conns, total_concurrent, total_queue, info)
			VALUES (f, m, t, t + ttl, have_c, have_b, have_q, tot_c, tot_b, tot_q, note)
			ON CONFLICT (fleet, member) DO NOTHING;
			GET DIAGNOSTICS n = ROW_COUNT;
		END IF;
		-- The lock is taken only once the row is known live: taken before, it would make a
		-- dead row look live.
		IF n > 0 AND NOT locked THEN
			PERFORM pg_try_advisory_lock(k, m);
		END IF;
	END IF;
	IF n = 0 THEN
		RETURN QUERY SELECT r.member, r.joined, %[1]s_live(k, r.member, r.expires, t), r.conns,
			array_to_string(r.concurrent, ','), array_to_string(r.queue, ','), r.total_conns,
			array_to_string(r.total_concurrent, ','), array_to_string(r.total_queue, ','), r.info, false,
			pg_backend_pid(), me_start, extract(epoch FROM r.expires - t)::float8, r.member::oid = ANY (held)
			FROM %[1]s r WHERE r.fleet = f ORDER BY r.joined, r.member;
		RETURN;
	END IF;
	-- A member that expects other leases to have expired by now names the others it expects live
	-- and what it wants in that fleet: when the fleet is that, it asks for that, so that the
	-- refresh that finds a lease expired also grants the room the lease frees.
	IF after_live IS NOT NULL AND NOT joining
		AND (SELECT coalesce(array_agg(r.member ORDER BY r.member), '{}') FROM %[1]s r
			WHERE r.fleet = f AND r.member <> m AND %[1]s_live(k, r.member, r.expires, t))
			= (SELECT coalesce(array_agg(x ORDER BY x), '{}') FROM unnest(after_live) AS x) THEN
		want_c := after_c;
		want_b := after_b;
		want_q := after_q;
	END IF;

	IF want_c > have_c OR EXISTS (SELECT 1 FROM unnest(want_b, have_b) AS w(a, b) WHERE a > b)
		OR EXISTS (SELECT 1 FROM unnest(want_q, have_q) AS w(a, b) WHERE a > b) THEN
		PERFORM pg_advisory_xact_lock(k, 0);
		-- From here on every statement's snapshot is taken after the lock: the others'
		-- declarations, including grants committed by the previous holder, are current.
		--
		-- A live lock is a live member, row or none: a member whose lease connection holds its
		-- lock but which has no row (the table was truncated or made again, or its row deleted,
		-- and it has not declared again yet) may hold any share, so nothing is free until it has
		-- declared what it holds. A newcomer's lock taken before its row is committed counts so
		-- too, for a moment. (k, 0) is this lock, no member's.
		--
		-- One statement looks for such locks and sums the others' declarations, so that both read
		-- the rows of one snapshot: every other member is then either in the sums, with what its
		-- row declares, or without a row there, and then its lock (read after the snapshot) holds
		-- the grant back. Read by two statements, a row deleted between them would be in
		-- neither: the first would see the row beside the lock, the second would sum without it.
		WITH o AS (
			SELECT r.conns, r.concurrent, r.queue, r.total_conns, r.total_concurrent, r.total_queue
			FROM %[1]s r WHERE r.fleet = f AND r.member <> m AND %[1]s_live(k, r.member, r.expires, t)
		), g AS (
			SELECT x.i, coalesce(sum(o.concurrent[x.i]), 0) AS sum_b, least(tot_b[x.i], min(o.total_concurrent[x.i])) AS least_b,
				coalesce(sum(o.queue[x.i]), 0) AS sum_q, least(tot_q[x.i], min(o.total_queue[x.i])) AS least_q
			FROM generate_series(1, coalesce(array_length(tot_b, 1), 0)) AS x(i) LEFT JOIN o ON true GROUP BY x.i
		)
		SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
				AND l.classid = k::oid AND l.objid <> 0::oid AND l.objid <> m::oid
				AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
				AND NOT EXISTS (SELECT 1 FROM %[1]s r WHERE r.fleet = f AND r.member::oid = l.objid)),
			(SELECT coalesce(sum(o.conns), 0) FROM o), (SELECT least(tot_c, min(o.total_conns)) FROM o),
			ARRAY(SELECT g.sum_b FROM g ORDER BY g.i), ARRAY(SELECT g.least_b FROM g ORDER BY g.i),
			ARRAY(SELECT g.sum_q FROM g ORDER BY g.i), ARRAY(SELECT g.least_q FROM g ORDER BY g.i)
			INTO unseen, oc, ec, ob, eb, oq, eq;
		IF unseen THEN
			want_c := have_c;
			want_b := have_b;
			want_q := have_q;
		END IF;
		grant_c := greatest(have_c, least(want_c, ec - oc));
		FOR i IN 1 .. coalesce(array_length(tot_b, 1), 0) LOOP
			grant_b[i] := greatest(have_b[i], least(want_b[i], eb[i] - ob[i]));
			grant_q[i] := greatest(have_q[i], least(want_q[i], eq[i] - oq[i]));
		END LOOP;
		UPDATE %[1]s AS r SET conns = grant_c, concurrent = grant_b, queue = grant_q
			WHERE r.fleet = f AND r.member = m;
		DELETE FROM %[1]s AS r WHERE r.fleet = f AND r.expires < t - 10 * ttl
			AND NOT %[1]s_live(k, r.member, r.expires, t);
	END IF;
	RETURN QUERY SELECT r.member, r.joined, %[1]s_live(k, r.member, r.expires, t), r.conns,
		array_to_string(r.concurrent, ','), array_to_string(r.queue, ','), r.total_conns,
		array_to_string(r.total_concurrent, ','), array_to_string(r.total_queue, ','), r.info, r.member = m,
		pg_backend_pid(), me_start, extract(epoch FROM r.expires - t)::float8, r.member::oid = ANY (held)
		FROM %[1]s r WHERE r.fleet = f ORDER BY r.joined, r.member;
END
$fn$$ddl$;
END IF;
END
$do$;
COMMIT`, table, RefreshSignature(table), timeout.Milliseconds())
}

// RefreshSignature is the refresh function's signature, which names its version: each
// version of gated that changes the function's parameters or its result adds parameters, so that
// its function is an overload of its own beside the older ones (PostgreSQL tells them apart by
// their parameters, and CREATE OR REPLACE cannot change a result). Instances of two versions on
// one table each call their own, and the two follow the same protocol on the same rows: the
// 0.1.0 function's members and these count each other and grant only from what all of them
// declare. EnsureSchema refuses a function of this signature whose result is not
// refreshResult rather than read rows it does not know.
func RefreshSignature(table string) string {
	return table + "_refresh(text,int,int,boolean,interval,interval,int,int[],int[],int,int[],int[],int,int[],int[],text,int,timestamptz," +
		"int[],int,int[],int[],boolean)"
}

// refreshResult is the refresh function's result as pg_get_function_result shows it.
const refreshResult = "TABLE(r_member integer, r_joined timestamp with time zone, r_live boolean, r_conns integer, " +
	"r_concurrent text, r_queue text, r_total_conns integer, r_total_concurrent text, r_total_queue text, r_info text, " +
	"r_mine boolean, r_pid integer, r_start timestamp with time zone, r_left double precision, r_locked boolean)"

// A fleetRow is one member as the refresh function reports it.
type fleetRow struct {
	member   int32
	joined   time.Time // by the database's clock
	live     bool
	declared Share
	totals   Share
	info     string
	mine     bool
	left     time.Duration // until its lease expires by the database's clock as the refresh ran; negative once expired
	locked   bool          // its lease connection held its lock when the refresh began
}

// A View is what a refresh saw: every member of the fleet, live or not, in join order.
type View struct {
	rows []fleetRow
	mine bool // the refresh found the member's row live and refreshed it
	// The lease connection's backend, which a later lease connection of the member terminates
	// should the server still hold it: zero when the fleet has no row.
	pid   int64
	start time.Time
}

// lapses reports whether r is another member's lease that only its TTL keeps counted: its lock
// is not held, so it stops being counted when it expires unless its member refreshes it first.
func (r *fleetRow) lapses() bool { return !r.mine && !r.locked && r.left > 0 }

// without returns v with the rows gone marks no longer live.
func (v *View) without(gone func(*fleetRow) bool) *View {
	w := *v
	w.rows = slices.Clone(v.rows)
	for i := range w.rows {
		if gone(&w.rows[i]) {
			w.rows[i].live = false
		}
	}
	return &w
}

// others returns the ids of the live members other than this one, sorted; never nil.
func (v *View) others() []int {
	ids := []int{}
	for _, r := range v.rows {
		if r.live && !r.mine {
			ids = append(ids, int(r.member))
		}
	}
	slices.Sort(ids)
	return ids
}

// me returns the member's own row.
func (v *View) me() *fleetRow {
	for i := range v.rows {
		if v.rows[i].mine {
			return &v.rows[i]
		}
	}
	return nil
}

// rank returns the number of live members and the member's rank among them (join order), and
// the fleet's totals: for each, the smallest that a live member was configured with, so that
// members of two configurations (a rolling deploy that changes the totals) keep to the lower.
func (v *View) rank(own Share) (n, rank int, totals Share) {
	totals = own.Clone()
	rank = -1
	for _, r := range v.rows {
		if !r.live {
			continue
		}
		if r.mine {
			rank = n
		}
		n++
		totals.Conns = min(totals.Conns, r.totals.Conns)
		for i := range totals.Concurrent {
			if i < len(r.totals.Concurrent) {
				totals.Concurrent[i] = min(totals.Concurrent[i], r.totals.Concurrent[i])
			}
			if i < len(r.totals.Queue) {
				totals.Queue[i] = min(totals.Queue[i], r.totals.Queue[i])
			}
		}
	}
	return n, rank, totals
}

// A Request is one member's refresh: what it holds, what it would like, its totals.
type Request struct {
	Fleet   string
	Key     int32
	Member  int32
	Joining bool
	TTL     time.Duration
	Skew    time.Duration // added to the database's clock: tests move it
	Have    Share
	Want    Share
	Totals  Share
	Info    string
	// The member's previous lease connection's backend, to be terminated; 0 for none.
	PrevPID   int64
	PrevStart time.Time
	// When the member expects leases of others to have expired by the time the refresh runs: the
	// others it expects live then (sorted, never nil), and what it wants in that fleet, asked
	// instead of Want if the fleet is that. No expectation when AfterLive is nil.
	AfterLive []int
	AfterWant Share
	// The member is joined and, should its row be gone while its lease connection holds its lock,
	// declares what it holds again instead of being told it is no longer counted.
	Reclaim bool
}

// Interval formats d for PostgreSQL's interval input.
func Interval(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}

func refreshQuery(table string) string {
	return "SELECT * FROM " + table + "_refresh($1, $2, $3, $4, $5::text::interval, $6::text::interval, " +
		"$7, $8::text::int[], $9::text::int[], $10, $11::text::int[], $12::text::int[], " +
		"$13, $14::text::int[], $15::text::int[], $16, $17, $18, " +
		"$19::text::int[], $20, $21::text::int[], $22::text::int[], $23)"
}

// Refresh runs one refresh on c.
func Refresh(ctx context.Context, c Conn, table string, r *Request) (*View, error) {
	var afterLive driver.Value
	after := r.Want
	if r.AfterLive != nil {
		afterLive, after = SQLInts(r.AfterLive), r.AfterWant
	}
	rows, err := c.Query(ctx, refreshQuery(table),
		r.Fleet, int64(r.Key), int64(r.Member), r.Joining, Interval(r.TTL), Interval(r.Skew),
		int64(r.Have.Conns), SQLInts(r.Have.Concurrent), SQLInts(r.Have.Queue),
		int64(r.Want.Conns), SQLInts(r.Want.Concurrent), SQLInts(r.Want.Queue),
		int64(r.Totals.Conns), SQLInts(r.Totals.Concurrent), SQLInts(r.Totals.Queue), r.Info,
		r.PrevPID, nullTime(r.PrevStart),
		afterLive, int64(after.Conns), SQLInts(after.Concurrent), SQLInts(after.Queue), r.Reclaim)
	if err != nil {
		return nil, err
	}
	v := &View{rows: make([]fleetRow, 0, len(rows))}
	for _, row := range rows {
		fr, err := scanFleetRow(row)
		if err != nil {
			return nil, err
		}
		v.mine = v.mine || fr.mine
		v.rows = append(v.rows, fr)
		v.pid, _ = row[11].(int64)
		v.start, _ = row[12].(time.Time)
	}
	return v, nil
}

var errFleetRow = errors.New("gated: fleet table: unexpected row from the refresh function")

func scanFleetRow(row []driver.Value) (fleetRow, error) {
	if len(row) != 15 {
		return fleetRow{}, errFleetRow
	}
	var fr fleetRow
	var errs []error
	num := func(v driver.Value) int {
		n, ok := v.(int64)
		if !ok {
			errs = append(errs, errFleetRow)
		}
		return int(n)
	}
	ints := func(v driver.Value) []int {
		s, err := ParseInts(TextValue(v))
		errs = append(errs, err)
		return s
	}
	fr.member = int32(num(row[0]))
	fr.joined, _ = row[1].(time.Time)
	fr.live, _ = row[2].(bool)
	fr.declared = Share{Conns: num(row[3]), Concurrent: ints(row[4]), Queue: ints(row[5])}
	fr.totals = Share{Conns: num(row[6]), Concurrent: ints(row[7]), Queue: ints(row[8])}
	fr.info = TextValue(row[9])
	fr.mine, _ = row[10].(bool)
	left, ok := row[13].(float64)
	if !ok {
		errs = append(errs, errFleetRow)
	}
	fr.left = time.Duration(left * float64(time.Second))
	fr.locked, _ = row[14].(bool)
	return fr, errors.Join(errs...)
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) driver.Value {
	if t.IsZero() {
		return nil
	}
	return t
}

// TextValue is v as text: a string or []byte value, "" for any other.
func TextValue(v driver.Value) string {
	switch s := v.(type) {
	case string:
		return s
	case []byte:
		return string(s)
	}
	return ""
}

// EnsureSchema creates what is missing of the fleet table and its functions: the table, the
// liveness function, and the refresh function of this version (the table may exist with the
// functions of other versions, which stay for the instances that call them). Each is looked for
// by itself, because the functions survive a DROP TABLE and the table survives a DROP FUNCTION.
// It refuses a refresh function of this signature with another result. A script that fails is
// rolled back, so that c stays usable (and its session locks held) when that succeeds; an error
// with SQLSTATE 42501 says that the role may not create what is missing.
func EnsureSchema(ctx context.Context, c Conn, table string) error {
	rows, err := c.Query(ctx, "SELECT to_regclass($1) IS NOT NULL, to_regprocedure($2) IS NOT NULL, pg_get_function_result(to_regprocedure($3))",
		table, table+"_live(int,int,timestamptz,timestamptz)", RefreshSignature(table))
	if err != nil {
		return fmt.Errorf("gated: fleet: looking for %s: %w", table, err)
	}
	if len(rows) != 1 || len(rows[0]) != 3 {
		return fmt.Errorf("gated: fleet: looking for %s: %w", table, errFleetRow)
	}
	hasTable, _ := rows[0][0].(bool)
	hasLive, _ := rows[0][1].(bool)
	if rows[0][2] != nil {
		if got := TextValue(rows[0][2]); got != refreshResult {
			return fmt.Errorf("gated: fleet: %s returns %s, not the %s this version of gated reads: it was made by another version; drop it (no instance of that version may be running) to have it made again",
				RefreshSignature(table), got, refreshResult)
		}
		if hasTable && hasLive {
			return nil
		}
	}
	// The server ends the transaction before ctx does: a statement that ctx interrupts costs the
	// connection it ran on (the call cuts it), and a member's lease connection holds its lock. It
	// answers 57014 instead, with half of the time left for the answer to arrive and to roll back.
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl)/2, time.Millisecond)
	}
	if err := c.Exec(ctx, schema(table, timeout)); err != nil {
		if rerr := c.Exec(ctx, "ROLLBACK"); rerr != nil {
			err = errors.Join(err, rerr)
		}
		if c.SQLState(err) == "42501" {
			return fmt.Errorf("gated: fleet: this role may not create the fleet table %s and its functions, and some are missing; create them once with a role that may by starting one instance with it (gate_fleet_table names them): %w", table, err)
		}
		return fmt.Errorf("gated: fleet: creating the fleet table %s: %w", table, err)
	}
	return nil
}

// leaveFleet deletes the member's row, which frees its share at once, and releases its lock.
func leaveFleet(ctx context.Context, c Conn, table, fleet string, key, member int32) error {
	_, err := c.Query(ctx, "DELETE FROM "+table+" WHERE fleet = $1 AND member = $2", fleet, int64(member))
	if err == nil {
		_, err = c.Query(ctx, "SELECT pg_advisory_unlock($1, $2)", int64(key), int64(member))
	}
	return err
}
