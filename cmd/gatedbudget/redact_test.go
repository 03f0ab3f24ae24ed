package main

import (
	"strings"
	"testing"
)

// A quoted password with an escaped quote and a space, in a DSN that fails to parse: pgx's own
// redaction cuts such a password at the space, and the command must show no piece of it.
func TestFailureShowsNoPieceOfAQuotedPassword(t *testing.T) {
	code, out, errOut := runCmd(t, "-dsn", `host=127.0.0.1 port=abc user=app password='se\'cr etWORD'`)
	if code != 2 {
		t.Errorf("exit %d, want 2; stdout %q stderr %q", code, out, errOut)
	}
	for _, piece := range []string{"se'c", `se\'`, "'cr ", "cr e", " etW", "etWO", "WORD"} {
		if strings.Contains(out+errOut, piece) {
			t.Errorf("output %q contains %q, a piece of the password", out+errOut, piece)
		}
	}
}
