package gatedhttp

import (
	"testing"

	"github.com/gatedsql/gated/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
