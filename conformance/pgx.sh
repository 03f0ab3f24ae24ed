#!/usr/bin/env bash
# pgx v5.12.0's database/sql suite (stdlib/sql_test.go), on plain pgx and through gated
# (gate_driver=pgx). See README.md. Exit status 1 when gated fails a test that passes plain.
source "$(dirname "$0")/lib.sh"

# Tests about pgx's own database/sql API rather than a *sql.DB, which a DSN cannot route through
# gated: hooks given to stdlib.OpenDB (OptionBeforeConnect/AfterConnect, OptionResetSession,
# OptionShouldPing), stdlib.RegisterConnConfig's registry, stdlib.OpenDBFromPool,
# RandomizeHostOrderFunc (opens nothing), and the two tests whose subject is the *stdlib.Conn that
# (*sql.Conn).Raw passes (gated passes its own connection; gated.Unwrap reaches pgx's).
SUITE_SKIP='^(TestSQLOpenFromPool|TestConnRaw|TestRegisterConnConfig|TestOptionBeforeAfterConnect|TestRandomizeHostOrderFunc|TestResetSessionHookCalled|TestCheckIdleConn|TestOptionShouldPing_HookCalledOnReuse)$'

src=$(moddir github.com/jackc/pgx/v5@v5.12.0)
pkg=$(scratch_module pgx)/stdlibtest
mkdir -p "$pkg"
cp "$src/stdlib/sql_test.go" "$CONF/testdata/pgx/gated_route_test.go" "$pkg/"
chmod u+w "$pkg"/*.go
f=$pkg/sql_test.go
# openDB, testWithAllQueryExecModes, and two tests with hooks (skipped above)
rewrite "$f" 'stdlib.OpenDB(' 'routeOpenDB(' 4
# TestSQLOpen; TestRegisterConnConfig and TestCheckIdleConn (skipped above)
rewrite "$f" 'sql.Open(' 'routeOpen(' 4
# skipCockroachDB, skipPostgreSQLVersionLessThan; TestConnRaw and TestCheckIdleConn (skipped above)
rewrite "$f" 'driverConn.(*stdlib.Conn)' 'asStdlibConn(driverConn)' 5

(cd "$pkg" && go test -c -vet=off "${RACE[@]}" -o "$TMP/pgx.test" .)

plain() { export PGX_TEST_DATABASE=$SCRATCH_DSN; }
gated() { export PGX_TEST_DATABASE=$SCRATCH_DSN CONFORMANCE_GATED="gate_driver=pgx $GATE_ROOM"; }
run_suite pgx-stdlib "$pkg" plain gated "$TMP/pgx.test"
