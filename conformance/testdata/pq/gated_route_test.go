package pq_test

// Copied into lib/pq's package directory by conformance/pq.sh. An external test package may
// import a package that imports the package under test, so this file, not pqtest, links gated
// into lib/pq's test binary and registers it as "gated".

import _ "github.com/gatedsql/gated"
