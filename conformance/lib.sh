# Shared by the suite scripts (sourced, not run). Each suite script copies a project's test files
# from the Go module cache into a scratch directory, rewrites where they open connections so that
# an environment variable routes them through gated, builds one test binary, runs it plain and
# gated (each run in a fresh scratch database) and compares the two runs.
#
# Needs Go, PostgreSQL at $GATED_TEST_DATABASE_URL (default 127.0.0.1:5432, user postgres, no
# password; the user must be allowed to create databases), and the Go module proxy when the
# module cache is cold.

set -euo pipefail

CONF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$CONF/.." && pwd)
DSN=${GATED_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
# -race by default, as for gated's own tests; CONFORMANCE_RACE=0 builds without it.
RACE=()
[ "${CONFORMANCE_RACE:-1}" = 1 ] && RACE=(-race)
# Gate settings for the gated runs besides gate_driver: room for every operation the suites start
# at once (pgx's TestConnConcurrency runs 50), waiting as long as their own deadlines allow. A
# refusal under overload is what gated is for, not a difference from the plain driver.
GATE_ROOM=${CONFORMANCE_GATE_ROOM:-gate_queue=64 gate_queue_wait=2m}
# These modules are not in the repository's go.work (if there is one); -mod=mod lets the go
# command complete the scratch modules' go.mod.
export GOWORK=off GOFLAGS=-mod=mod

# The scratch directory and databases, removed when the script exits however it exits.
# conformance/run shares one scratch directory between the suites (CONFORMANCE_TMP).
if [ -z "${CONFORMANCE_TMP:-}" ]; then
  CONFORMANCE_TMP=$(mktemp -d "${TMPDIR:-/tmp}/gated-conformance.XXXXXX")
  cleanup() {
    if [ -s "$CONFORMANCE_TMP/databases" ]; then
      while read -r db; do
        "$CONFORMANCE_TMP/bin/scratchdb" drop "$DSN" "$db" || true
      done <"$CONFORMANCE_TMP/databases"
    fi
    rm -rf "$CONFORMANCE_TMP"
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM
fi
export CONFORMANCE_TMP
TMP=$CONFORMANCE_TMP

if [ ! -x "$TMP/bin/scratchdb" ]; then
  (cd "$CONF" && go build -buildvcs=false -o "$TMP/bin/" ./cmd/tally ./cmd/testsusing ./cmd/scratchdb)
fi

# moddir MODULE@VERSION: the module's source directory in the module cache (downloaded if needed).
moddir() {
  (cd "$CONF" && go mod download -json "$1") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# scratch_module NAME: a module in $TMP/NAME with conformance/go.mod's requirements and checksums,
# gated replaced by this checkout. Prints its directory.
scratch_module() {
  local dir=$TMP/$1
  mkdir -p "$dir"
  sed "s#^replace github.com/gatedsql/gated => .*#replace github.com/gatedsql/gated => $ROOT#" \
    "$CONF/go.mod" >"$dir/go.mod"
  cp "$CONF/go.sum" "$dir/go.sum"
  echo "$dir"
}

# rewrite FILE FROM TO WANT: replace the literal text FROM by TO and fail unless FROM occurred
# WANT times, so that a changed upstream file cannot silently run unrouted.
rewrite() {
  local file=$1 got
  got=$(FROM=$2 TO=$3 perl -0777 -i -pe '$n = s/\Q$ENV{FROM}\E/$ENV{TO}/g; END { print STDERR $n+0 }' "$file" 2>&1)
  if [ "$got" != "$4" ]; then
    echo "conformance: $file: \"$2\" occurs $got times, want $4" >&2
    exit 2
  fi
}

# with_params DSN KEY=VALUE...: the DSN with parameters added, in its own form (URL or keyword/value).
with_params() {
  local dsn=$1 sep=' '
  shift
  case $dsn in
  postgres://* | postgresql://*)
    sep='?'
    [[ $dsn == *\?* ]] && sep='&'
    ;;
  esac
  for p in "$@"; do
    dsn+=$sep$p
    [ "$sep" = '?' ] && sep='&'
  done
  echo "$dsn"
}

# run_tests SUITE MODE DIR CONFIGURE BINARY: run a test binary built with go test -c in DIR (its
# package directory, for testdata) against a fresh scratch database, and print the summary line.
# A test that ends the process counts as failed; the database is emptied before the binary runs the
# remaining tests. The results go to $TMP/SUITE.MODE.txt, the test2json stream to
# $TMP/SUITE.MODE.json. CONFIGURE is a command run first, in the same subshell, with SCRATCH_DSN
# (the scratch database's DSN) and PGHOST, PGPORT, PGUSER, PGDATABASE, PGSSLMODE set; it exports
# what the tests read. SUITE_RUN and SUITE_SKIP, when set, are regular expressions of the
# top-level tests to run and not to run.
run_tests() {
  local suite=$1 mode=$2 dir=$3 configure=$4 bin=$5 rc=0
  (
    eval "$("$TMP/bin/scratchdb" create "$DSN")"
    echo "$SCRATCH_DB" >>"$TMP/databases"
    export PGHOST PGPORT PGUSER PGDATABASE PGSSLMODE
    if [ -n "${PGPASSWORD:-}" ]; then export PGPASSWORD; fi
    $configure
    "$TMP/bin/tally" run -suite "$suite" -mode "$mode" -dir "$dir" -log "$TMP/$suite.$mode.json" \
      -out "$TMP/$suite.$mode.txt" -run "${SUITE_RUN:-.}" -skip "${SUITE_SKIP:-}" \
      -reset "$(printf '%q ' "$TMP/bin/scratchdb" reset "$DSN" "$SCRATCH_DB")" \
      -- "$bin" -test.count=1 -test.timeout=10m
    "$TMP/bin/scratchdb" drop "$DSN" "$SCRATCH_DB"
  ) || rc=$?
  # What the routing files report (how many *sql.DB went through gated).
  sed -n 's/.*"Output":"\(conformance: [^"]*\)\\n".*/  \1/p' "$TMP/$suite.$mode.json" 2>/dev/null || true
  return $rc
}

# compare SUITE: exit status 1 when SUITE's gated run fails a test that its plain run passes,
# printing the output of those tests.
# SUITE_BY_DESIGN lists tests gated fails on purpose (README.md says why).
compare() {
  "$TMP/bin/tally" compare -suite "$1" -expected "${SUITE_BY_DESIGN:-}" -log "$TMP/$1.gated.json" \
    -lost "$TMP/$1.lost" "$TMP/$1.plain.txt" "$TMP/$1.gated.txt"
}

# run_suite SUITE DIR PLAIN GATED BINARY: run_tests plain (CONFIGURE PLAIN) and gated (GATED), and
# compare. A test that gated fails and plain passes is then run alone, plain and gated, twice: the
# suites time calls against their deadlines (lib/pq's TestQueryRowContext allows 50 ms past one),
# which a whole suite running beside the race detector on two cores can make miss, through gated
# as plain. It stays a difference unless gated passes it in both runs alone; the output of the
# full run's failure is printed either way. Exit status 1 on a difference.
run_suite() {
  local suite=$1 dir=$2 plaincfg=$3 gatedcfg=$4 bin=$5 lost n
  run_tests "$suite" plain "$dir" "$plaincfg" "$bin"
  run_tests "$suite" gated "$dir" "$gatedcfg" "$bin"
  compare "$suite" && return 0
  # The process's own result cannot be run alone.
  if grep -qxF '(process)' "$TMP/$suite.lost"; then return 1; fi
  lost=$(paste -sd '|' "$TMP/$suite.lost")
  for n in 1 2; do
    echo "$suite: run alone, plain and gated ($n of 2): $lost"
    SUITE_RUN="^($lost)\$" SUITE_SKIP= run_tests "$suite-alone$n" plain "$dir" "$plaincfg" "$bin"
    SUITE_RUN="^($lost)\$" SUITE_SKIP= run_tests "$suite-alone$n" gated "$dir" "$gatedcfg" "$bin"
    compare "$suite-alone$n" || return 1
  done
  echo "$suite: gated passed alone, twice, what it failed in the full run: a timing under its load, not a difference"
}
