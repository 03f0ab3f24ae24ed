package gatedbudget

import (
	"strings"
	"testing"
)

func TestEvaluateAtTheBoundary(t *testing.T) {
	s := Settings{MaxConnections: 100, SuperuserReserved: 3, Reserved: 2} // 95 available
	for _, tc := range []struct {
		name         string
		plan         Plan
		wantFits     bool
		wantHeadroom int
		wantMaxP     int
	}{
		{"exactly full", Plan{Instances: 4, Surge: 1, Other: 15, PerInstance: 16}, true, 0, 16},
		{"one over by other", Plan{Instances: 4, Surge: 1, Other: 16, PerInstance: 16}, false, -1, 15},
		{"one over by P", Plan{Instances: 5, Surge: 0, Other: 0, PerInstance: 20}, false, -5, 19},
		{"surge counted", Plan{Instances: 4, Surge: 2, Other: 0, PerInstance: 16}, false, -1, 15},
		{"other above everything", Plan{Instances: 1, Other: 200, PerInstance: 1}, false, -106, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Evaluate(s, tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			if r.Fits != tc.wantFits || r.Headroom != tc.wantHeadroom || r.MaxPerInstance != tc.wantMaxP || r.Available != 95 {
				t.Errorf("got fits %v headroom %d maxP %d available %d, want %v %d %d 95",
					r.Fits, r.Headroom, r.MaxPerInstance, r.Available, tc.wantFits, tc.wantHeadroom, tc.wantMaxP)
			}
		})
	}
}

func TestEvaluateRejectsImpossiblePlans(t *testing.T) {
	for _, p := range []Plan{
		{Instances: 0, PerInstance: 1},
		{Instances: 1, Surge: -1, PerInstance: 1},
		{Instances: 1, Other: -1, PerInstance: 1},
		{Instances: 1, PerInstance: 0},
	} {
		if _, err := Evaluate(Settings{MaxConnections: 100}, p); err == nil || !strings.HasPrefix(err.Error(), "gated: ") {
			t.Errorf("Evaluate(%+v) = %v, want a gated: error", p, err)
		}
	}
}

func TestReportPrintsTheFormula(t *testing.T) {
	r, _ := Evaluate(Settings{MaxConnections: 20, SuperuserReserved: 4}, Plan{Instances: 2, Surge: 1, Other: 5, PerInstance: 4})
	want := `available: max_connections 20 − superuser_reserved_connections 4 − reserved_connections 0 = 16
needed:    (instances 2 + surge 1) × P 4 + other 5 = 17
headroom:  16 − 17 = -1: does NOT fit
largest P per instance that fits: 3
`
	if got := r.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}

func TestPerInstanceSumsGateMaxConns(t *testing.T) {
	p, err := PerInstance("postgres://h/db?gate_max_conns=7", "host=h gate_concurrent=4", "postgres://h/db?gate_concurrent=12")
	if err != nil {
		t.Fatal(err)
	}
	if p != 7+10+12 {
		t.Errorf("PerInstance = %d, want 29 (7, the default 10, and 12 from gate_concurrent)", p)
	}
	_, err = PerInstance("postgres://app:s3cr3t@h/db?gate_max_conns=zero")
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "gate_max_conns") {
		t.Errorf("bad DSN: %v, want an error naming gate_max_conns without the password", err)
	}
}

// TestPerInstanceCountsASharedPoolOnce: DSNs with the same gate_name share one pool in a
// process, so its gate_max_conns counts once; a differing gate_max_conns is an error, as gated
// would refuse to open the second.
func TestPerInstanceCountsASharedPoolOnce(t *testing.T) {
	p, err := PerInstance("postgres://h/db?gate_name=shop&gate_max_conns=30", "postgres://h/db?gate_name=shop&gate_max_conns=30", "postgres://h/other?gate_max_conns=5")
	if err != nil || p != 35 {
		t.Errorf("PerInstance = %d, %v; want 35 (shop's 30 once, and 5)", p, err)
	}
	pools, err := Pools("postgres://h/db?gate_name=shop&gate_max_conns=30", "postgres://h/db?gate_name=shop&gate_max_conns=30")
	if err != nil || len(pools) != 1 || pools[0] != (Pool{Name: "shop", MaxConns: 30, DSNs: 2}) {
		t.Errorf("Pools = %+v, %v", pools, err)
	}
	if _, err := PerInstance("postgres://app:s3cr3t@h/db?gate_name=shop&gate_max_conns=30", "postgres://app:s3cr3t@h/db?gate_name=shop&gate_max_conns=20"); err == nil ||
		!strings.Contains(err.Error(), `gate_name "shop"`) || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("differing gate_max_conns under one gate_name: %v", err)
	}
}

// A pool with gate_fleet=on is the fleet's total, held by all its instances together: it counts
// once, not per instance, with one lease connection more for each instance, surge included.
func TestAFleetsPoolCountsOnceWithALeasePerInstance(t *testing.T) {
	dsns := []string{
		"postgres://app@db/shop?gate_max_conns=20&gate_fleet=on&gate_name=shop",
		"postgres://app@db/shop?gate_max_conns=5",
	}
	p, err := PerInstance(dsns...)
	if err != nil || p != 5 {
		t.Fatalf("PerInstance = %d, %v; want 5 (the pool without gate_fleet=on)", p, err)
	}
	f, err := FleetConns(dsns...)
	if err != nil || f != 20 {
		t.Fatalf("FleetConns = %d, %v; want 20", f, err)
	}
	r, err := Evaluate(Settings{MaxConnections: 100, SuperuserReserved: 3}, Plan{Instances: 6, Surge: 2, Other: 4, PerInstance: p, FleetConns: f})
	if err != nil {
		t.Fatal(err)
	}
	// (6 + 2) × 5 + 20 + (6 + 2) leases + 4 = 72 of 97.
	if r.Needed != 72 || !r.Fits || r.MaxPerInstance != (97-4-20-8)/8 {
		t.Errorf("Needed = %d, Fits = %v, MaxPerInstance = %d; want 72, true, %d\n%s", r.Needed, r.Fits, r.MaxPerInstance, (97-4-20-8)/8, r)
	}
	if !strings.Contains(r.String(), "fleet totals 20 + leases 8") {
		t.Errorf("the report does not show the fleet's term:\n%s", r)
	}
	// Only fleet pools: P per instance 0 is a valid plan.
	if _, err := Evaluate(Settings{MaxConnections: 100}, Plan{Instances: 3, PerInstance: 0, FleetConns: 20}); err != nil {
		t.Errorf("a plan of fleet pools only: %v", err)
	}
}
