-- The fleet table and its functions as gated v0.1.0 creates them (fmt verb: the table).
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('gated_fleet_schema'));
CREATE TABLE IF NOT EXISTS %[1]s (
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
);
CREATE OR REPLACE FUNCTION %[1]s_live(k int, m int, expires timestamptz, t timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
	SELECT expires > t OR EXISTS (
		SELECT 1 FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
		AND l.classid = k::oid AND l.objid = m::oid
		AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()))
$fn$;
CREATE OR REPLACE FUNCTION %[1]s_refresh(
	f text, k int, m int, joining boolean, ttl interval, skew interval,
	have_c int, have_b int[], have_q int[],
	want_c int, want_b int[], want_q int[],
	tot_c int, tot_b int[], tot_q int[], note text, prev_pid int, prev_start timestamptz)
RETURNS TABLE(r_member int, r_joined timestamptz, r_live boolean, r_conns int, r_concurrent text, r_queue text,
	r_total_conns int, r_total_concurrent text, r_total_queue text, r_info text, r_mine boolean,
	r_pid int, r_start timestamptz)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
	t timestamptz := clock_timestamp() + skew;
	n int;
	locked boolean;
	grant_c int;
	grant_b int[] := have_b;
	grant_q int[] := have_q;
	oc int; ob int; oq int;
	ec int; eb int; eq int;
	me_start timestamptz := (SELECT a.backend_start FROM pg_stat_activity a WHERE a.pid = pg_backend_pid());
BEGIN
	IF prev_pid > 0 AND prev_pid <> pg_backend_pid() THEN
		-- The member's previous lease connection, given up after a timeout or a partition while
		-- the server may still hold it open: it would count one above the share until the
		-- server's TCP keepalive ended it.
		PERFORM pg_terminate_backend(a.pid) FROM pg_stat_activity a
			WHERE a.pid = prev_pid AND a.backend_start = prev_start AND a.usename = current_user;
	END IF;
	SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
		AND l.pid = pg_backend_pid() AND l.classid = k::oid AND l.objid = m::oid) INTO locked;
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
	ELSE
		-- Only a live row is refreshed: once the others may have counted a member's share as
		-- free, that member must join again from nothing.
		UPDATE %[1]s AS r SET expires = t + ttl, conns = have_c, concurrent = have_b, queue = have_q,
			total_conns = tot_c, total_concurrent = tot_b, total_queue = tot_q, info = note
		WHERE r.fleet = f AND r.member = m AND %[1]s_live(k, m, r.expires, t);
		GET DIAGNOSTICS n = ROW_COUNT;
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
			pg_backend_pid(), me_start
			FROM %[1]s r WHERE r.fleet = f ORDER BY r.joined, r.member;
		RETURN;
	END IF;

	IF want_c > have_c OR EXISTS (SELECT 1 FROM unnest(want_b, have_b) AS w(a, b) WHERE a > b)
		OR EXISTS (SELECT 1 FROM unnest(want_q, have_q) AS w(a, b) WHERE a > b) THEN
		PERFORM pg_advisory_xact_lock(k, 0);
		-- From here on every statement's snapshot is taken after the lock: the others'
		-- declarations, including grants committed by the previous holder, are current.
		SELECT coalesce(sum(r.conns), 0), least(tot_c, min(r.total_conns)) INTO oc, ec
			FROM %[1]s r WHERE r.fleet = f AND r.member <> m AND %[1]s_live(k, r.member, r.expires, t);
		grant_c := greatest(have_c, least(want_c, ec - oc));
		FOR i IN 1 .. coalesce(array_length(tot_b, 1), 0) LOOP
			SELECT coalesce(sum(r.concurrent[i]), 0), least(tot_b[i], min(r.total_concurrent[i])),
				coalesce(sum(r.queue[i]), 0), least(tot_q[i], min(r.total_queue[i]))
				INTO ob, eb, oq, eq
				FROM %[1]s r WHERE r.fleet = f AND r.member <> m AND %[1]s_live(k, r.member, r.expires, t);
			grant_b[i] := greatest(have_b[i], least(want_b[i], eb - ob));
			grant_q[i] := greatest(have_q[i], least(want_q[i], eq - oq));
		END LOOP;
		UPDATE %[1]s AS r SET conns = grant_c, concurrent = grant_b, queue = grant_q
			WHERE r.fleet = f AND r.member = m;
		DELETE FROM %[1]s AS r WHERE r.fleet = f AND r.expires < t - 10 * ttl
			AND NOT %[1]s_live(k, r.member, r.expires, t);
	END IF;
	RETURN QUERY SELECT r.member, r.joined, %[1]s_live(k, r.member, r.expires, t), r.conns,
		array_to_string(r.concurrent, ','), array_to_string(r.queue, ','), r.total_conns,
		array_to_string(r.total_concurrent, ','), array_to_string(r.total_queue, ','), r.info, r.member = m,
		pg_backend_pid(), me_start
		FROM %[1]s r WHERE r.fleet = f ORDER BY r.joined, r.member;
END
$fn$;
COMMIT
