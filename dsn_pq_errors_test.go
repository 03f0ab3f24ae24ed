package gated

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// TestLibPQDSNErrorKeepsItsType: a DSN that lib/pq cannot parse fails the first connection, as
// with lib/pq itself (sql.Open and gated.Open succeed), with an error that still wraps lib/pq's
// own (errors.As finds its type), while no message — gated's, or that of the wrapped error a
// caller may print — contains the password.
func TestLibPQDSNErrorKeepsItsType(t *testing.T) {
	cases := []struct {
		name, dsn string
		as        func(error) (error, bool) // finds lib/pq's error in the chain
	}{
		{"URL, bad port", "postgres://app:" + testPassword + "@db.example:badport/shop?gate_driver=postgres",
			func(err error) (error, bool) { var e *url.Error; return e, errors.As(err, &e) }},
		{"keyword/value, bad port", "host=db.example user=app password=" + testPassword + " port=x gate_driver=postgres",
			func(err error) (error, bool) { var e *strconv.NumError; return e, errors.As(err, &e) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for name, open := range map[string]func(string) (*sql.DB, error){
				"sql.Open":   func(dsn string) (*sql.DB, error) { return sql.Open(DriverName, dsn) },
				"gated.Open": Open,
			} {
				db, err := open(tc.dsn)
				if err != nil {
					t.Fatalf("%s: %v; lib/pq reports a DSN it cannot read when it connects", name, err)
				}
				err = db.Ping()
				db.Close()
				if err == nil {
					t.Fatalf("%s(%q): Ping succeeded", name, tc.dsn)
				}
				found, ok := tc.as(err)
				if !ok {
					t.Errorf("%s: errors.As does not find lib/pq's error in %q (%T)", name, err, errors.Unwrap(err))
				}
				if !strings.HasPrefix(err.Error(), "gated: ") {
					t.Errorf("%s: error %q does not start with \"gated: \"", name, err)
				}
				for what, msg := range map[string]string{
					"Error()":        err.Error(),
					"%+v":            fmt.Sprintf("%+v", err),
					"lib/pq's error": fmt.Sprint(found),
				} {
					if strings.Contains(msg, testPassword) {
						t.Errorf("%s: %s %q contains the password", name, what, msg)
					}
				}
			}
		})
	}
}
