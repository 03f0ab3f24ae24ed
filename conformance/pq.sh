#!/usr/bin/env bash
# lib/pq v1.12.3's tests that open their *sql.DB through its test helper (pqtest.DB, pqtest.MustDB),
# on plain lib/pq and through gated (gate_driver=postgres). See README.md. Exit status 1 when gated
# fails a test that passes plain.
source "$(dirname "$0")/lib.sh"

src=$(moddir github.com/lib/pq@v1.12.3)
mod=$TMP/pq
cp -r "$src" "$mod"
chmod -R u+w "$mod"
cp "$CONF/testdata/pq/gated_route.go" "$mod/internal/pqtest/"
cp "$CONF/testdata/pq/gated_route_test.go" "$mod/"
rewrite "$mod/internal/pqtest/pqtest.go" 'sql.Open("postgres", DSN(' 'conformanceOpen(DSN(' 1
rewrite "$mod/pq_test.go" 'e := m.Run()' 'e := max(m.Run(), pqtest.ConformanceReport())' 1
# lib/pq's tests run inside its own module (they use its internal packages), with gated from this
# checkout and the checksums of both modules' requirements.
(
  cd "$mod"
  go mod edit -require=github.com/gatedsql/gated@v0.0.0-00010101000000-000000000000 \
    -replace=github.com/gatedsql/gated="$ROOT"
  cat "$CONF/go.sum" "$ROOT/go.sum" >>go.sum
  go test -c -vet=off "${RACE[@]}" -o "$TMP/pq.test" .
)

# The tests that reach the helper, directly or through the test files' own helper functions.
SUITE_RUN="^($("$TMP/bin/testsusing" "$mod" pqtest.DB pqtest.MustDB | paste -sd '|'))\$"

# Tests that need lib/pq's docker setup (compose.yaml, testdata/postgres/entry.sh): roles pqgossl,
# pqgosslcert and pqgomd5 with its certificates and pg_hba.conf (TestAuth, TestSSL*), or a database
# and user named pqgo, which its fake servers insist on (TestStartupParameters, and TestConnectMulti,
# which runs on its own below). They fail plain and gated alike on a plain server, so they are left
# out unless CONFORMANCE_PQ_DOCKER_TESTS=1.
if [ "${CONFORMANCE_PQ_DOCKER_TESTS:-0}" != 1 ]; then
  SUITE_SKIP='^(TestAuth|TestConnectMulti|TestStartupParameters|TestSSLClientCertificateIntermediate|TestSSLClientCertificates|TestSSLDefaults|TestSSLMode|TestSSLRootCA|TestSSLSNI|TestSSLVersion)$'
fi

# Tests that gated fails on purpose, stricter than plain lib/pq + database/sql:
# - TestUnexpectedEOF wants database/sql to run again a query whose connection broke after the
#   server had answered part of it; gated never runs again what may have reached the server.
# - TestQueryRowContextBad compares the error of a cancelled call with context.Canceled by ==;
#   gated wraps the context's error (with gated.ErrWaitCanceled when the call had not started), so
#   errors.Is(err, context.Canceled) holds and == does not.
SUITE_BY_DESIGN=TestUnexpectedEOF,TestQueryRowContextBad

plain() { :; }
gated() { export CONFORMANCE_GATED="$GATE_ROOM"; }
status=0
run_suite libpq "$mod" plain gated "$TMP/pq.test" || status=1

# TestConnectMulti dials fake servers of its own, which want the database name pqgo (no real
# database of that name is needed), and checks the shape of lib/pq's error for several hosts:
# one error per host behind Unwrap() []error. lib/pq's TestMain then looks for sessions it left
# behind in database pqgo, which this server does not have: "the test process failed after its
# tests passed" is that check, the same plain and gated.
if [ "${CONFORMANCE_PQ_DOCKER_TESTS:-0}" != 1 ]; then
  multi_plain() { export PGDATABASE=pqgo; }
  multi_gated() { export PGDATABASE=pqgo CONFORMANCE_GATED="$GATE_ROOM"; }
  SUITE_RUN='^TestConnectMulti$' SUITE_SKIP= SUITE_BY_DESIGN= run_suite libpq-multi "$mod" multi_plain multi_gated "$TMP/pq.test" || status=1
fi
exit $status
