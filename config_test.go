package gated

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The same settings give the same gate whether they come from a DSN or a Config literal: a zero
// field is the default of its DSN key, None is the DSN's 0.
func TestConfigLiteralAndDSNGiveTheSameGate(t *testing.T) {
	tests := []struct {
		name string
		dsn  string
		lit  Config
	}{
		{"no keys", "host=db", Config{DSN: "host=db"}},
		{"empty", "", Config{}},
		{"P alone", "gate_max_conns=4 host=db", Config{DSN: "host=db", MaxConns: 4}},
		{"B alone above the default P", "gate_concurrent=16 host=db", Config{DSN: "host=db", Concurrent: 16}},
		{"B and Q", "host=db gate_concurrent=6 gate_queue=2", Config{DSN: "host=db", Concurrent: 6, Queue: 2}},
		{"no queue, no wait", "postgres://db/shop?gate_queue=0&gate_queue_wait=0s",
			Config{DSN: "postgres://db/shop", Queue: None, QueueWait: None}},
		{"no lifetimes", "host=db gate_max_conn_lifetime=0 gate_max_conn_idle_time=0s",
			Config{DSN: "host=db", MaxConnLifetime: None, MaxConnIdleTime: None}},
		{"lifetime with its default jitter", "host=db gate_max_conn_lifetime=10m", Config{DSN: "host=db", MaxConnLifetime: 10 * time.Minute}},
		{"explicit jitter", "host=db gate_max_conn_lifetime_jitter=30s", Config{DSN: "host=db", MaxConnLifetimeJitter: 30 * time.Second}},
		{"no jitter", "host=db gate_max_conn_lifetime_jitter=0s", Config{DSN: "host=db", MaxConnLifetimeJitter: None}},
		{"workloads with defaults and nones", "host=db gate_queue_wait=20ms gate_workloads=batch:2,report:1:0:0s,bulk:1:3",
			Config{DSN: "host=db", QueueWait: 20 * time.Millisecond, Workloads: []Workload{
				{Name: "batch", Concurrent: 2}, {Name: "report", Concurrent: 1, Queue: None, QueueWait: None}, {Name: "bulk", Concurrent: 1, Queue: 3}}}},
		{"spelled-out defaults", "host=db gate_queue_order=fifo gate_pooler=none gate_statement_timeout=off gate_lock_timeout=0",
			Config{DSN: "host=db", QueueOrder: QueueFIFO, Pooler: "none", StatementTimeout: None, LockTimeout: None}},
		{"timeouts", "host=db gate_statement_timeout=deadline:5s gate_lock_timeout=1s",
			Config{DSN: "host=db", StatementTimeout: 5 * time.Second, StatementDeadline: true, LockTimeout: time.Second}},
		{"every field", "gate_driver=postgres gate_max_conns=12 gate_concurrent=5 gate_queue=7 gate_queue_wait=250ms " +
			"gate_max_conn_lifetime=2h gate_max_conn_lifetime_jitter=1m gate_max_conn_idle_time=5m gate_queue_order=adaptive " +
			"gate_workloads=batch:3:1:1s host=db",
			Config{Driver: "postgres", DSN: "host=db", MaxConns: 12, Concurrent: 5, Queue: 7, QueueWait: 250 * time.Millisecond,
				MaxConnLifetime: 2 * time.Hour, MaxConnLifetimeJitter: time.Minute, MaxConnIdleTime: 5 * time.Minute,
				QueueOrder: QueueAdaptive, Workloads: []Workload{{Name: "batch", Concurrent: 3, Queue: 1, QueueWait: time.Second}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parsed, err := ParseDSN(tt.dsn)
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", tt.dsn, err)
			}
			lit := tt.lit
			fromDSN := newTestConnector(t, parsed)
			fromLit := newTestConnector(t, &lit)
			if !reflect.DeepEqual(lit, tt.lit) {
				t.Errorf("NewConnector changed the Config it was given: %+v", lit)
			}
			if got, want := fromLit.Config(), fromDSN.Config(); !reflect.DeepEqual(got, want) {
				t.Errorf("normalized configurations differ\nliteral %+v\n    DSN %+v", got, want)
			}
			for _, name := range fromDSN.Workloads() {
				a, _ := fromDSN.WorkloadStats(name)
				b, ok := fromLit.WorkloadStats(name)
				if !ok || a != b {
					t.Errorf("workload %s: Stats from the DSN %+v, from the literal %+v", name, a, b)
				}
			}
			if a, b := fromDSN.pool, fromLit.pool; a.lifetime != b.lifetime || a.idleTime != b.idleTime || a.jitter != b.jitter {
				t.Errorf("pools differ: DSN lifetime %v+%v idle %v, literal %v+%v idle %v", a.lifetime, a.jitter, a.idleTime, b.lifetime, b.jitter, b.idleTime)
			}
			// The literal, written as a DSN and read back, is the same gate again.
			again, err := ParseDSN(tt.lit.FormatDSN())
			if err != nil {
				t.Fatalf("ParseDSN(FormatDSN() = %q): %v", tt.lit.FormatDSN(), err)
			}
			if err := sameGate(fromDSN.Config(), newTestConnector(t, again).Config()); err != nil {
				t.Errorf("FormatDSN() = %q reads back as another gate: %v", tt.lit.FormatDSN(), err)
			}
			// A normalized Config is a fixed point.
			norm := fromLit.Config()
			if err := norm.normalize(); err != nil || !reflect.DeepEqual(norm, fromLit.Config()) {
				t.Errorf("normalizing again: %v, %+v", err, norm)
			}
		})
	}
}

// newTestConnector makes a Connector for cfg (no I/O) and closes it at the end of the test.
func newTestConnector(t *testing.T, cfg *Config) *Connector {
	t.Helper()
	c, err := NewConnector(cfg)
	if err != nil {
		t.Fatalf("NewConnector(%+v): %v", *cfg, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestNoneIsTheOnlyNegative(t *testing.T) {
	for _, tt := range []struct {
		cfg Config
		key string
	}{
		{Config{Queue: -2}, keyQueue},
		{Config{QueueWait: -time.Millisecond}, keyQueueWait},
		{Config{MaxConnLifetimeJitter: -time.Second}, keyMaxConnLifetimeJitter},
		{Config{LockTimeout: -time.Second}, keyLockTimeout},
		{Config{Workloads: []Workload{{Name: "w", Concurrent: 1, Queue: -3}}}, keyWorkloads},
		{Config{Workloads: []Workload{{Name: "w", Concurrent: 1, QueueWait: -time.Second}}}, keyWorkloads},
		{Config{MaxConns: None}, keyMaxConns},
		{Config{Concurrent: None}, keyConcurrent},
		{Config{MaxConnLifetime: None, MaxConnLifetimeJitter: time.Minute}, keyMaxConnLifetimeJitter},
	} {
		_, err := NewConnector(&tt.cfg)
		checkDSNError(t, err, tt.key)
	}
}

// dsnKeyExamples holds a value other than the default for every gate_ key: TestDSNKeysTable
// fails for a row without one.
var dsnKeyExamples = map[string]string{
	keyDriver:                "postgres",
	keyMaxConns:              "20",
	keyConcurrent:            "4",
	keyConcurrentMin:         "2",
	keyQueue:                 "0",
	keyQueueWait:             "250ms",
	keyMaxConnLifetime:       "2h0m0s",
	keyMaxConnLifetimeJitter: "1m0s",
	keyMaxConnIdleTime:       "0s",
	keyQueueOrder:            "adaptive",
	keyWorkloads:             "batch:2:1:1s",
	keyName:                  "keys-table",
	keyStmtTimeout:           "deadline:5s",
	keyLockTimeout:           "1s",
	keyPooler:                "transaction",
	keyFleet:                 "on",
	keyFleetTable:            "ops.fleet",
	keyFleetTTL:              "30s",
	keyFleetRefresh:          "2s",
}

// Every row of dsnKeys is parsed into a field, formatted back, round-tripped, compared by
// sameGate and documented; together the rows reach every field of Config that has a DSN key.
func TestDSNKeysTable(t *testing.T) {
	base, err := ParseDSN("host=db")
	if err != nil {
		t.Fatal(err)
	}
	docs := readDocs(t)
	touched := map[string]bool{}
	for _, k := range dsnKeys {
		t.Run(k.name, func(t *testing.T) {
			if _, isDefault := k.get(base); !isDefault {
				t.Errorf("get of a DSN without the key says it is not the default")
			}
			ex, ok := dsnKeyExamples[k.name]
			if !ok {
				t.Fatalf("no example value in dsnKeyExamples")
			}
			dsn := "host=db " + k.name + "=" + ex
			c, err := ParseDSN(dsn)
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", dsn, err)
			}
			bv, cv := reflect.ValueOf(*base), reflect.ValueOf(*c)
			for i := range bv.NumField() {
				if !reflect.DeepEqual(bv.Field(i).Interface(), cv.Field(i).Interface()) {
					touched[bv.Type().Field(i).Name] = true
				}
			}
			if reflect.DeepEqual(c, base) {
				t.Errorf("ParseDSN(%q) stores nothing", dsn)
			}
			s := c.FormatDSN()
			if !strings.Contains(s, k.name+"="+ex) {
				t.Errorf("FormatDSN() = %q, want it to write %s=%s", s, k.name, ex)
			}
			back, err := ParseDSN(s)
			if err != nil || !reflect.DeepEqual(back, c) {
				t.Errorf("ParseDSN(FormatDSN() = %q) = %+v, %v; want %+v", s, back, err, c)
			}
			// sameGate compares what get returns, row by row.
			was, _ := k.get(base)
			is, _ := k.get(c)
			var de *DSNError
			if err := sameGate(base, c); was == is || !errors.As(err, &de) {
				t.Errorf("sameGate = %v, get %q and %q: want the row to tell the gates apart", err, was, is)
			}
			if err := sameGate(c, c.Clone()); err != nil {
				t.Errorf("sameGate of a Config and its clone: %v", err)
			}
			for file, text := range docs {
				if file == docUser {
					continue
				}
				if !strings.Contains(text, k.name) {
					t.Errorf("%s does not mention %s", file, k.name)
				}
			}
			if !strings.Contains(docs[docUser], k.name) {
				t.Errorf("neither docs/configuration.md nor README.md documents %s", k.name)
			}
		})
	}
	// A second value for keys whose values reach more than one field.
	for key, ex := range map[string]string{keyConcurrent: "auto"} {
		c, err := ParseDSN("host=db " + key + "=" + ex)
		if err != nil {
			t.Fatalf("ParseDSN(%s=%s): %v", key, ex, err)
		}
		if back, err := ParseDSN(c.FormatDSN()); err != nil || !reflect.DeepEqual(back, c) {
			t.Errorf("%s=%s: ParseDSN(FormatDSN() = %q) = %+v, %v; want %+v", key, ex, c.FormatDSN(), back, err, c)
		}
		bv, cv := reflect.ValueOf(*base), reflect.ValueOf(*c)
		for i := range bv.NumField() {
			if !reflect.DeepEqual(bv.Field(i).Interface(), cv.Field(i).Interface()) {
				touched[bv.Type().Field(i).Name] = true
			}
		}
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		switch name := typ.Field(i).Name; name {
		case "DSN", "Observer", "Logger", "PgxBeforeConnect", "PgxAfterConnect":
		default:
			if !touched[name] {
				t.Errorf("Config.%s is set by no DSN key of dsnKeys", name)
			}
		}
	}
}

// The rows of dsnKeys marked postgres are the keys that need a PostgreSQL driver: with
// gate_driver=mysql each of them is refused by name when given a value other than its default,
// and every other key is not.
func TestDSNKeysThatNeedPostgreSQL(t *testing.T) {
	for _, k := range dsnKeys {
		if k.name == keyDriver {
			continue
		}
		dsn := "host=db gate_driver=mysql " + k.name + "=" + dsnKeyExamples[k.name]
		_, err := ParseDSN(dsn)
		var de *DSNError
		switch {
		case k.postgres && (!errors.As(err, &de) || de.Key != k.name || !strings.Contains(err.Error(), "needs a PostgreSQL driver")):
			t.Errorf("ParseDSN(%q) = %v, want a *DSNError saying %s needs a PostgreSQL driver", dsn, err, k.name)
		case !k.postgres && err != nil:
			t.Errorf("ParseDSN(%q) = %v, want no error with gate_driver=mysql", dsn, err)
		}
	}
}

const docUser = "docs/configuration.md or README.md"

// readDocs returns the texts that must name every key: doc.go, the doc comment of ParseDSN, and
// under docUser the user documentation (docs/configuration.md when it exists, and README.md).
func readDocs(t *testing.T) map[string]string {
	t.Helper()
	docs := map[string]string{}
	for _, f := range []string{"docs/configuration.md", "README.md"} {
		if b, err := os.ReadFile(f); err == nil {
			docs[docUser] += string(b)
		}
	}
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	docs["doc.go"] = string(b)
	f, err := parser.ParseFile(token.NewFileSet(), "dsn.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "ParseDSN" && fd.Recv == nil {
			docs["the doc comment of ParseDSN"] = fd.Doc.Text()
		}
	}
	if docs["the doc comment of ParseDSN"] == "" {
		t.Fatal("ParseDSN has no doc comment in dsn.go")
	}
	return docs
}

// pgxpool's pool_ keys would reach the server as settings and fail the first connection: they
// are refused, naming the gate_ key that does the same, or saying that none does.
func TestPoolKeysAreRefusedWithTheGateKey(t *testing.T) {
	advice := map[string]string{
		"pool_max_conns":                "gate_max_conns",
		"pool_min_conns":                "no minimum",
		"pool_min_idle_conns":           "no minimum",
		"pool_max_conn_lifetime":        "gate_max_conn_lifetime",
		"pool_max_conn_lifetime_jitter": "gate_max_conn_lifetime_jitter",
		"pool_max_conn_idle_time":       "gate_max_conn_idle_time",
		"pool_health_check_period":      "no periodic check",
		"pool_ping_timeout":             "no periodic check",
		"pool_whatever":                 "no pool_ keys",
		"POOL_MAX_CONNS":                "gate_max_conns",
	}
	for key, want := range advice {
		for _, dsn := range []string{
			"postgres://app:" + testPassword + "@db/shop?sslmode=disable&" + key + "=4",
			"host=db password=" + testPassword + " " + key + "=4",
			"host=db password=" + testPassword + " " + key + "=4 gate_driver=postgres",
			"app:" + testPassword + "@tcp(db)/shop?" + key + "=4&gate_driver=mysql",
		} {
			cfg, err := ParseDSN(dsn)
			if err == nil {
				t.Errorf("ParseDSN(%q) = %+v, want an error", dsn, *cfg)
				continue
			}
			checkDSNError(t, err, key)
			if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), testPassword) {
				t.Errorf("ParseDSN(%q): %q, want it to say %q and not quote the password", dsn, err, want)
			}
		}
		// Built in code, the same.
		_, err := NewConnector(&Config{DSN: "postgres://db/shop?" + key + "=4"})
		checkDSNError(t, err, key)
	}
	// Another driver may have pool_ settings of its own.
	if cfg, err := ParseDSN("file:x.db?pool_size=4&gate_driver=sqlite"); err != nil || cfg.DSN != "file:x.db?pool_size=4" {
		t.Errorf("ParseDSN with gate_driver=sqlite: %+v, %v; want pool_size passed on", cfg, err)
	}
}
