package pgcontract_test

// Malformed DSNs through the public paths sql.Open and gated.Open: errors name the key and never
// quote the password (the root package's dsn_test.go covers ParseDSN itself in depth).

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gatedsql/gated"
)

// Through the public paths sql.Open("gated", dsn) and gated.Open (the root package's
// dsn_test.go covers ParseDSN itself in depth): each error is a *DSNError naming the key, starts with
// "gated: " and does not contain the password.
func TestMalformedDSNErrorsNameTheKeyWithoutThePassword(t *testing.T) {
	const url = "postgres://app:" + testPassword + "@db.example/shop?sslmode=disable&"
	const kv = "host=db.example user=app password=" + testPassword + " "
	cases := []struct {
		name, dsn, key string
	}{
		{"unknown key, URL", url + "gate_concurency=4", "gate_concurency"},
		{"unknown key, keyword/value", kv + "gate_timeout=1s", "gate_timeout"},
		{"unparsable count, URL", url + "gate_max_conns=ten", "gate_max_conns"},
		{"unparsable duration, keyword/value", kv + "gate_queue_wait=soon", "gate_queue_wait"},
		{"duration without unit", url + "gate_max_conn_lifetime=60", "gate_max_conn_lifetime"},
		{"negative count, URL", url + "gate_queue=-1", "gate_queue"},
		{"negative duration, keyword/value", kv + "gate_max_conn_idle_time=-5m", "gate_max_conn_idle_time"},
		{"B > P, URL", url + "gate_max_conns=2&gate_concurrent=3", "gate_concurrent"},
		{"B > P, keyword/value", kv + "gate_concurrent=3 gate_max_conns=2", "gate_concurrent"},
		{"zero P", kv + "gate_max_conns=0", "gate_max_conns"},
		{"empty value, URL", url + "gate_queue_wait=", "gate_queue_wait"},
		{"empty driver, keyword/value at the end", kv + "gate_driver=", "gate_driver"},
		{"empty quoted driver", kv + "gate_driver=''", "gate_driver"},
		{"key without value", kv + "gate_queue", "gate_queue"},
		{"repeated key", url + "gate_queue=1&gate_queue=2", "gate_queue"},
		{"unregistered driver", url + "gate_driver=nosuchdriver", "gate_driver"},
		{"only gate keys, URL query", "?gate_concurrent=x", "gate_concurrent"},
		{"only gate keys, keyword/value", "gate_queue=-3", "gate_queue"},
		// As in libpq, an empty value takes the next word: here the whole password pair.
		{"empty value before the password pair", "host=db.example gate_queue= password=" + testPassword, "gate_queue"},
		{"empty driver before the password pair", "host=db.example gate_driver= password=" + testPassword, "gate_driver"},
		{"escaped space joins the password pair", "host=db.example gate_queue_wait=1s\\ password=" + testPassword, "gate_queue_wait"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.dsn, testPassword) && !strings.HasPrefix(tc.dsn, "?") && !strings.HasPrefix(tc.dsn, "gate_") {
				t.Fatalf("test DSN %q lacks the password", tc.dsn)
			}
			for name, open := range map[string]func(string) (*sql.DB, error){
				"sql.Open":   func(dsn string) (*sql.DB, error) { return sql.Open(gated.DriverName, dsn) },
				"gated.Open": gated.Open,
			} {
				db, err := open(tc.dsn)
				if err == nil {
					db.Close()
					t.Errorf("%s(%q) succeeded", name, tc.dsn)
					continue
				}
				if db != nil {
					t.Errorf("%s returned a *sql.DB with its error", name)
				}
				var de *gated.DSNError
				if !errors.As(err, &de) || de.Key != tc.key {
					t.Errorf("%s: error %q is not a *DSNError for key %s", name, err, tc.key)
				}
				if msg := err.Error(); !strings.HasPrefix(msg, "gated: ") || !strings.Contains(msg, tc.key) {
					t.Errorf("%s: error %q does not start with \"gated: \" and name %s", name, msg, tc.key)
				}
				if strings.Contains(err.Error(), testPassword) {
					t.Errorf("%s: error %q contains the password", name, err)
				}
			}
		})
	}
	// An inner DSN the inner driver cannot parse: no gate_ key to name, and still no password,
	// whether the inner driver reports it from sql.Open or from the first operation.
	for _, tc := range []struct{ name, dsn string }{
		{"pgx, bad port", "postgres://app:" + testPassword + "@db.example:badport/shop"},
		{"pgx, bad sslmode", kv + "sslmode=bogus"},
		{"lib/pq, bad port", "postgres://app:" + testPassword + "@db.example:badport/shop?gate_driver=postgres"},
		{"lib/pq, bad percent-escape", "postgres://app:" + testPassword + "@db.example/shop?x=%zz&gate_driver=postgres"},
		{"lib/pq, bad sslmode", kv + "sslmode=bogus gate_driver=postgres"},
	} {
		t.Run("inner DSN/"+tc.name, func(t *testing.T) {
			for name, open := range map[string]func(string) (*sql.DB, error){
				"sql.Open":   func(dsn string) (*sql.DB, error) { return sql.Open(gated.DriverName, dsn) },
				"gated.Open": gated.Open,
			} {
				db, err := open(tc.dsn)
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err = db.PingContext(ctx)
					cancel()
					if c, ok := gated.FromDB(db); ok && c.Stats().Running != 0 {
						t.Errorf("%s: the failed first operation kept its permit", name)
					}
					db.Close()
					if err == nil {
						t.Errorf("%s(%q) and its first operation succeeded", name, tc.dsn)
						continue
					}
				} else if !strings.HasPrefix(err.Error(), "gated: ") {
					t.Errorf("%s: error %q does not start with \"gated: \"", name, err)
				}
				if strings.Contains(err.Error(), testPassword) {
					t.Errorf("%s: error %q contains the password", name, err)
				}
			}
		})
	}
}

// FuzzParseDSN in the root package's dsn_test.go checks the parser (parse, format, parse again:
// stable; errors are *DSNError naming gate_ keys only). Its password check runs on its seeds
// only, because a mutated DSN can legitimately put the password anywhere. This fuzz target fills
// that gap for the property that matters: whatever gate_ material (or, in form 3, URL tail) surrounds a
// well-formed password, no error of ParseDSN or NewConnector quotes it.
func FuzzContractDSNErrorNeverQuotesThePassword(f *testing.F) {
	for _, s := range []string{
		"gate_queue=1", "gate_queue=", "gate_driver=", "gate_queue_wait=1s\\", "gate_queue='", "gate_x",
		"gate_concurrent=3 gate_max_conns=2", "gate_queue=1&gate_queue=2", "gate_driver=nosuch",
		"gate_driver=postgres&x=%zz", ":badport/shop?gate_driver=postgres",
	} {
		for form := range uint8(4) {
			f.Add(s, form)
		}
	}
	f.Fuzz(func(t *testing.T, gate string, form uint8) {
		if strings.Contains(gate, testPassword[:4]) {
			t.Skip("the fuzzed part spells the password itself")
		}
		var dsn string
		switch form % 4 {
		case 0: // keyword/value, password pair after the gate part
			dsn = "host=db " + gate + " password=" + testPassword
		case 1: // keyword/value, password pair before it
			dsn = "host=db password=" + testPassword + " " + gate
		case 2: // URL, gate part as the query
			dsn = "postgres://app:" + testPassword + "@db/shop?" + gate
		case 3: // URL, gate part right after the host: port, path, query
			dsn = "postgres://app:" + testPassword + "@db" + gate
		}
		cfg, err := gated.ParseDSN(dsn)
		if err == nil {
			_, err = gated.NewConnector(cfg)
		}
		checkDSNErrorSafe(t, dsn, err, testPassword)
	})
}
