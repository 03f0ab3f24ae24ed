package drivers

import "testing"

func TestStartsWithCopy(t *testing.T) {
	for q, want := range map[string]bool{
		"COPY t FROM STDIN":                true,
		"  copy t (a) from stdin":          true,
		"-- load\n\tCoPy t FROM STDIN":     true,
		"/* a */ /* b */COPY t FROM STDIN": true,
		"SELECT 'COPY'":                    false,
		"-- COPY t FROM STDIN":             false,
		"/* COPY t FROM STDIN":             false,
		"cop":                              false,
		"copying":                          true, // as lib/pq: the server then rejects it
		"":                                 false,
	} {
		if got := startsWithCopy(q); got != want {
			t.Errorf("startsWithCopy(%q) = %v, want %v", q, got, want)
		}
	}
}
