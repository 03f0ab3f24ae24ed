package gated

import (
	"os"
	"testing"

	"github.com/gatedsql/gated/internal/pgtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
