package gated

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The root package stays light: a user who imports it downloads and compiles nothing but the
// standard library, pgx v5 and lib/pq (and what those two need themselves). Its own internal
// packages (the limiter, the fleet, the DSN parser, the socket wrapper, the driver seam) are part
// of this module and bring nothing else. Everything heavier (Prometheus, OpenTelemetry, plotting)
// lives in a module of its own that imports the root.
func TestRootLinksOnlyTheStandardLibraryPgxAndLibPQ(t *testing.T) {
	pgx := modulesOf(t, "github.com/jackc/pgx/v5/stdlib")
	drivers := modulesOf(t, "github.com/jackc/pgx/v5/stdlib", "github.com/lib/pq")
	if !slices.Contains(drivers, "github.com/jackc/pgx/v5") || !slices.Contains(drivers, "github.com/lib/pq") {
		t.Fatalf("the drivers' own modules are %q: want pgx v5 and lib/pq among them", drivers)
	}
	root := modulesOf(t, ".")
	beyond := func(allowed []string) []string {
		return slices.DeleteFunc(slices.Clone(root), func(m string) bool {
			return m == "github.com/gatedsql/gated" || slices.Contains(allowed, m)
		})
	}
	if got := beyond(drivers); len(got) > 0 {
		t.Errorf("the root package links modules beyond the standard library, pgx and lib/pq: %q", got)
	}
	// The check sees a module the root does link beyond a narrower set: lib/pq beyond pgx's.
	if got := beyond(pgx); !slices.Contains(got, "github.com/lib/pq") {
		t.Errorf("the root's modules beyond pgx's are %q: want lib/pq among them", got)
	}
}

// modulesOf returns the modules, outside the standard library, of the packages pkgs and every
// package they import.
func modulesOf(t *testing.T, pkgs ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to list the packages' imports: %v", err)
	}
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{with .Module}}{{.Path}}{{end}}{{end}}"}, pkgs...)
	out, err := exec.Command(goBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var mods []string
	for _, m := range strings.Fields(string(out)) {
		if !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	slices.Sort(mods)
	return mods
}
