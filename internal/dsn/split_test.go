package dsn

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// testPassword is in every DSN that fails, so a test can tell that no error message quotes it.
const testPassword = "s3cr3t-pw"

var gate = Prefixed("gate_")

var splitTests = []struct {
	name, in, inner string
	params          []Param
}{
	{"empty DSN", "", "", nil},
	{"plain DSN passes through", ":memory:", ":memory:", nil},
	{"URL without gate keys is unchanged", "postgres://app:pw@db:5432/shop?sslmode=disable", "postgres://app:pw@db:5432/shop?sslmode=disable", nil},
	{"URL gate key taken out", "postgres://app:" + testPassword + "@db/shop?sslmode=disable&gate_concurrent=4",
		"postgres://app:" + testPassword + "@db/shop?sslmode=disable", []Param{{"gate_concurrent", "4"}}},
	{"URL keys between inner params, in order", "postgresql://db/shop?gate_driver=postgres&sslmode=require&gate_max_conns=20&application_name=web",
		"postgresql://db/shop?sslmode=require&application_name=web", []Param{{"gate_driver", "postgres"}, {"gate_max_conns", "20"}}},
	{"URL only gate keys drops the question mark", "postgres://db/shop?gate_queue=3", "postgres://db/shop", []Param{{"gate_queue", "3"}}},
	{"URL fragment kept", "postgres://db/shop?a=1&gate_queue=3#frag", "postgres://db/shop?a=1#frag", []Param{{"gate_queue", "3"}}},
	{"URL gate key in fragment is not a key", "postgres://db/shop#?gate_queue=3", "postgres://db/shop#?gate_queue=3", nil},
	{"URL percent-encoded password kept byte for byte", "postgres://app:s3cr3t%2Fpw%3F%26gate_queue%3D9%40@db/shop?gate_concurrent=2",
		"postgres://app:s3cr3t%2Fpw%3F%26gate_queue%3D9%40@db/shop", []Param{{"gate_concurrent", "2"}}},
	{"URL raw params kept byte for byte", "postgres://db/shop?options=-c%20search_path%3Dx&a=b+c&&gate_queue=1&z&q=x?y",
		"postgres://db/shop?options=-c%20search_path%3Dx&a=b+c&&z&q=x?y", []Param{{"gate_queue", "1"}}},
	{"URL percent-encoded key and value", "postgres://db/shop?gate%5Fqueue=1%32&gate_driver=my%2Bdrv+x",
		"postgres://db/shop", []Param{{"gate_queue", "12"}, {"gate_driver", "my+drv x"}}},
	{"URL look-alike keys stay", "postgres://db/shop?gate=1&gatekeeper=x&gat_queue=3", "postgres://db/shop?gate=1&gatekeeper=x&gat_queue=3", nil},
	{"URL empty query kept when a param is left", "postgres://db/shop?&gate_queue=1", "postgres://db/shop?", []Param{{"gate_queue", "1"}}},
	{"URL key in another case is taken out", "postgres://db/shop?GATE_CONCURRENT=4", "postgres://db/shop", []Param{{"GATE_CONCURRENT", "4"}}},
	{"query only", "?gate_concurrent=4", "", []Param{{"gate_concurrent", "4"}}},
	{"mysql password with '?', '&', '#' and a fake key", "app:p?ss&gate_queue=9#x@tcp(db)/shop?gate_queue=3",
		"app:p?ss&gate_queue=9#x@tcp(db)/shop", []Param{{"gate_queue", "3"}}},
	{"mysql password with '?' and no query", "app:p?ss@tcp(db)/shop", "app:p?ss@tcp(db)/shop", nil},
	{"keyword/value quoted password with spaces", "host=localhost user=app password='se cret' gate_concurrent=4 dbname=shop",
		"host=localhost user=app password='se cret' dbname=shop", []Param{{"gate_concurrent", "4"}}},
	{"keyword/value escaped quote and backslash in password", `password='it\'s a \\ ` + testPassword + `' gate_queue=2 host=db`,
		`password='it\'s a \\ ` + testPassword + `' host=db`, []Param{{"gate_queue", "2"}}},
	{"keyword/value password with '?' and '://'", "host=db password=pa?ss://x gate_queue=2", "host=db password=pa?ss://x", []Param{{"gate_queue", "2"}}},
	{"keyword/value spaces around '='", "host = localhost gate_concurrent = 4 port=5432", "host = localhost port=5432", []Param{{"gate_concurrent", "4"}}},
	{"keyword/value other whitespace kept", "host=db\n\tgate_queue=5\nport=1", "host=db\n\nport=1", []Param{{"gate_queue", "5"}}},
	{"keyword/value quoted value with escapes", `host=db gate_driver='my \'drv\\x' port=1`, "host=db port=1", []Param{{"gate_driver", `my 'drv\x`}}},
	{"keyword/value pair right after a quoted value", "a='x'gate_queue=2 b=1", "a='x'b=1", []Param{{"gate_queue", "2"}}},
	{"keyword/value space kept before a pair glued to a quoted value", "host=db gate_driver='pgx'port=5432", "host=db port=5432", []Param{{"gate_driver", "pgx"}}},
	{"keyword/value empty value takes the next word, as in libpq", "password= gate_queue=2", "password= gate_queue=2", nil},
	{"keyword/value without keyword start", "a b=1 gate_queue=1", "a b=1", []Param{{"gate_queue", "1"}}},
	{"keyword/value empty quoted value", "host=db gate_driver=''", "host=db", []Param{{"gate_driver", ""}}},
}

func TestSplitTakesOutTheKeysAndKeepsEveryOtherByte(t *testing.T) {
	for _, tt := range splitTests {
		t.Run(tt.name, func(t *testing.T) {
			inner, params, err := Split(tt.in, gate)
			if err != nil {
				t.Fatalf("Split(%q): %v", tt.in, err)
			}
			if inner != tt.inner || !reflect.DeepEqual(params, tt.params) {
				t.Errorf("Split(%q) = %q, %q; want %q, %q", tt.in, inner, params, tt.inner, tt.params)
			}
		})
	}
}

func TestSplitErrorsNameTheKeyWithoutThePassword(t *testing.T) {
	for _, tt := range []struct {
		name, in, key string // key "": the DSN as a whole
		err           error  // nil: any
	}{
		{"unterminated quote in an inner pair", "password='" + testPassword + " gate_queue=2", "", errUnterminated},
		{"unterminated quote in a gate pair", "password=" + testPassword + " gate_driver='pgx", "gate_driver", errUnterminated},
		{"gate key without value", "password=" + testPassword + " gate_queue", "gate_queue", errMissingValue},
		{"gate value ending in backslash", "password=" + testPassword + ` gate_driver=x\`, "gate_driver", errBackslashEnd},
		{"bad percent-escape in value", "postgres://app:" + testPassword + "@db/shop?gate_driver=pg%zz", "gate_driver", nil},
		{"bad percent-escape in key", "postgres://app:" + testPassword + "@db/shop?gate_%zz=1", "gate_%zz", nil},
		{"what is left would not read", "0='" + testPassword + "?gate_queue=0", "gate_queue", errStrandedForm},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inner, params, err := Split(tt.in, gate)
			var de *Error
			if !errors.As(err, &de) || de.Key != tt.key {
				t.Fatalf("Split(%q) = %q, %q, %v; want an *Error for key %q", tt.in, inner, params, err, tt.key)
			}
			if tt.err != nil && !strings.Contains(err.Error(), tt.err.Error()) {
				t.Errorf("error %q does not say %q", err, tt.err)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
}

func TestJoinWritesWhatSplitTakesBack(t *testing.T) {
	for _, tt := range []struct {
		name, dsn string
		params    []Param
		want      string
	}{
		{"no params", "postgres://db/shop?sslmode=disable", nil, "postgres://db/shop?sslmode=disable"},
		{"empty DSN uses keyword/value", "", []Param{{"gate_concurrent", "4"}}, "gate_concurrent=4"},
		{"keyword/value in front", "host=db password=", []Param{{"gate_concurrent", "4"}}, "gate_concurrent=4 host=db password="},
		{"URL appends to query", "postgres://db/shop?sslmode=disable", []Param{{"gate_queue", "2"}}, "postgres://db/shop?sslmode=disable&gate_queue=2"},
		{"URL with fragment and no query", "postgres://db/shop#f", []Param{{"gate_queue", "0"}}, "postgres://db/shop?gate_queue=0#f"},
		{"URL with empty query", "postgres://db/shop?", []Param{{"gate_queue", "0"}}, "postgres://db/shop?&gate_queue=0"},
		{"plain DSN gets a query", ":memory:", []Param{{"gate_driver", "sqlite"}}, ":memory:?gate_driver=sqlite"},
		{"escaped in query form", "file:x.db", []Param{{"gate_driver", "my drv&x"}}, "file:x.db?gate_driver=my+drv%26x"},
		{"quoted in keyword/value form", "host=db", []Param{{"gate_driver", `it's \ x`}}, `gate_driver='it\'s \\ x' host=db`},
		{"empty value quoted", "host=db", []Param{{"gate_name", ""}, {"gate_queue", "1"}}, "gate_name='' gate_queue=1 host=db"},
		{"mysql password with '?'", "app:p?ss@tcp(db)/shop", []Param{{"gate_queue", "1"}}, "app:p?ss@tcp(db)/shop?gate_queue=1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Join(tt.dsn, tt.params)
			if got != tt.want {
				t.Errorf("Join(%q, %q) = %q, want %q", tt.dsn, tt.params, got, tt.want)
			}
			inner, params, err := Split(got, gate)
			if err != nil || inner != tt.dsn || !reflect.DeepEqual(params, tt.params) {
				t.Errorf("Split(%q) = %q, %q, %v; want %q, %q", got, inner, params, err, tt.dsn, tt.params)
			}
		})
	}
}

// lowerKeys reports whether every key is made of lower-case letters and '_', as gated's are.
func lowerKeys(params []Param) bool {
	for _, p := range params {
		if p.Key == "" || strings.Trim(p.Key, "abcdefghijklmnopqrstuvwxyz_") != "" {
			return false
		}
	}
	return true
}

// Whatever the DSN, what Split leaves is no longer than it, an error names no key but ours (any
// other word of a broken DSN may be a password), and when what is left holds no key of ours, Join
// writes the keys taken out back so that Split finds them and the same rest again.
func FuzzSplitJoin(f *testing.F) {
	for _, tt := range splitTests {
		f.Add(tt.in)
	}
	for _, s := range []string{
		"a gate_queue=1 =b",
		"gate_queue='1'=b",
		"x?gate_queue=1@y?gate_queue_wait=2s",
		"gate_queue=1 a?gate_queue_wait=1s",
		"gate_queue=1 a=x\\",
		"a=x\\ gate_queue=1",
		"s://h#f?gate_queue=1",
		"u:p#w?z@h?gate_queue=1#f",
		"gate_queue=1   ",
		"gate_driver=a://b?c#d@e",
		"0='?gate_queue=0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		inner, params, err := Split(dsn, gate)
		if err != nil {
			var de *Error
			if !errors.As(err, &de) || de.Key != "" && !gate(de.Key) {
				t.Fatalf("Split(%q): error %v names a key that is not ours", dsn, err)
			}
			return
		}
		if len(inner) > len(dsn) {
			t.Fatalf("Split(%q): what is left, %q, is longer than the DSN", dsn, inner)
		}
		if again, left, err := Split(inner, gate); !lowerKeys(params) || again != inner || left != nil || err != nil {
			return // a key of ours stranded in what is left, which gated refuses
		}
		joined := Join(inner, params)
		inner2, params2, err := Split(joined, gate)
		if err != nil || inner2 != inner || !reflect.DeepEqual(params2, params) {
			t.Fatalf("Split(%q) = %q, %q\nJoin = %q\nSplit = %q, %q, %v", dsn, inner, params, joined, inner2, params2, err)
		}
	})
}
