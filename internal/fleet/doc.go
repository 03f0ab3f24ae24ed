// Package fleet is gate_fleet=on's coordination: instances with the same gate_name on one
// PostgreSQL database share its budgets (gate_max_conns, each gate's B and Q) as totals, each
// running with its share, through a lease table on that database.
//
// It owns the membership (Member: a loop that joins, refreshes its lease, fences and leaves), the
// lease protocol and its SQL (the table and its functions, the refresh, the notifications between
// members, Read's listing) and the share arithmetic (Share, TargetShare). It never dials and
// never sees a driver: it is given a function that opens its lease connection (Conn), which runs
// its statements, classifies their errors and may wait for notifications. It never touches a
// gate's fields or the pool: it moves the instance only through the Target it is given, and
// reports through Stats. What it logs goes to the logger it is given.
//
// The gated package adapts its Config, its physical connections and its gate set to these
// interfaces; this package does not import it.
package fleet
