package pgtest

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is the TestMain of every package whose tests use a server from this package: it runs the
// tests, stops a private cluster that [URL] may have started, and then fails the run when a
// goroutine outlived the tests (goleak).
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
