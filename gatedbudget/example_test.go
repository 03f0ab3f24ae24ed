package gatedbudget_test

import (
	"fmt"
	"log"

	"github.com/gatedsql/gated/gatedbudget"
)

// Evaluate works out whether a fleet fits the server's connection limits. Check does the same
// with the Settings read from a live server (ReadSettings).
func ExampleEvaluate() {
	server := gatedbudget.Settings{MaxConnections: 100, SuperuserReserved: 3}
	plan := gatedbudget.Plan{Instances: 12, Surge: 3, Other: 10, PerInstance: 6}
	r, err := gatedbudget.Evaluate(server, plan)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(r)
	fmt.Println("fits:", r.Fits)
	// Output:
	// available: max_connections 100 − superuser_reserved_connections 3 − reserved_connections 0 = 97
	// needed:    (instances 12 + surge 3) × P 6 + other 10 = 100
	// headroom:  97 − 100 = -3: does NOT fit
	// largest P per instance that fits: 5
	// fits: false
}
