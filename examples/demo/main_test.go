package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gatedsql/gated/examples/internal/extest"
	"github.com/gatedsql/gated/internal/pgtest"
)

func TestMain(m *testing.M) { extest.Main(m) }

// wantStdout is what the README and the package comment promise the demo prints.
const wantStdout = "overload=rejected\nquery=42\navailable=1\n"

// TestDemoPrintsTheDocumentedLinesAndNamesItsDatabaseOnStderr: stdout is exactly the three
// documented lines whichever database the demo used, and stderr says which one that was.
func TestDemoPrintsTheDocumentedLinesAndNamesItsDatabaseOnStderr(t *testing.T) {
	for _, tc := range []struct {
		name        string
		databaseURL func(t *testing.T) string
		wantStderr  string
	}{
		{"SQLite", func(*testing.T) string { return "" }, "demo: using an in-memory SQLite database"},
		{"PostgreSQL", func(t *testing.T) string { return pgtest.URL(t) }, "demo: using PostgreSQL from DATABASE_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), dsn(tc.databaseURL(t)), &stdout, &stderr); err != nil {
				t.Fatal(err)
			}
			if got := stdout.String(); got != wantStdout {
				t.Errorf("stdout = %q, want %q", got, wantStdout)
			}
			if got := stderr.String(); !strings.HasPrefix(got, tc.wantStderr) {
				t.Errorf("stderr = %q, want it to start with %q", got, tc.wantStderr)
			}
		})
	}
}
