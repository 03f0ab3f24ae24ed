#!/usr/bin/env bash
# sqlx v1.4.0's package tests against PostgreSQL, on plain lib/pq and plain pgx, and through gated
# with each as the inner driver. See README.md. Exit status 1 when gated fails a test that passes
# on the plain driver.
source "$(dirname "$0")/lib.sh"

src=$(moddir github.com/jmoiron/sqlx@v1.4.0)
pkg=$(scratch_module sqlx)/sqlxtest
mkdir -p "$pkg"
cp "$src"/*.go "$CONF/testdata/sqlx/gated_route_test.go" "$pkg/"
chmod u+w "$pkg"/*.go
rewrite "$pkg/sqlx_test.go" 'Connect("postgres", pgdsn)' 'Connect(pgDriver, pgdsn)' 1
# SQLite and MySQL are skipped (SQLX_*_DSN=skip below); dropping the import saves compiling
# go-sqlite3's C code.
rewrite "$pkg/sqlx_test.go" '_ "github.com/mattn/go-sqlite3"' '' 1
rewrite "$pkg/sqlx_context_test.go" '_ "github.com/mattn/go-sqlite3"' '' 1

(cd "$pkg" && go test -c -vet=off "${RACE[@]}" -o "$TMP/sqlx.test" .)

export SQLX_MYSQL_DSN=skip SQLX_SQLITE_DSN=skip
plain() { export SQLX_POSTGRES_DSN=$SCRATCH_DSN CONFORMANCE_SQLX_DRIVER=$inner; }
gated() {
  export SQLX_POSTGRES_DSN CONFORMANCE_SQLX_DRIVER=gated
  SQLX_POSTGRES_DSN=$(with_params "$SCRATCH_DSN" "gate_driver=$inner" $GATE_ROOM)
}
status=0
for inner in postgres pgx; do
  suite=sqlx-$inner
  [ $inner = postgres ] && suite=sqlx-libpq
  run_suite $suite "$pkg" plain gated "$TMP/sqlx.test" || status=$(($? > status ? $? : status))
done
exit $status
