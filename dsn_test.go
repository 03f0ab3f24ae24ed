package gated

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testPassword is in every malformed DSN, so a test can tell that no error message quotes it.
const testPassword = "s3cr3t-pw"

// dsnDefaults returns a Config with the defaults a DSN without gate_ keys gets, spelled out:
// what ParseDSN("") returns (validDSNTests checks it).
func dsnDefaults() *Config {
	return &Config{Driver: "pgx", MaxConns: 10, Concurrent: 10, Queue: 10, QueueWait: time.Second,
		MaxConnLifetime: time.Hour, MaxConnIdleTime: 30 * time.Minute}
}

// cfgWith returns the DSN defaults with the inner DSN and the changes of mod applied.
func cfgWith(dsn string, mod func(*Config)) Config {
	c := dsnDefaults()
	c.DSN = dsn
	if mod != nil {
		mod(c)
	}
	return *c
}

var validDSNTests = []struct {
	name string
	in   string
	want Config
}{
	{"empty DSN gets defaults", "", cfgWith("", nil)},
	{"plain DSN passes through", ":memory:", cfgWith(":memory:", nil)},
	{"URL without gate keys is unchanged", "postgres://app:pw@db:5432/shop?sslmode=disable",
		cfgWith("postgres://app:pw@db:5432/shop?sslmode=disable", nil)},
	{"URL gate key stripped, queue follows concurrent",
		"postgres://app:" + testPassword + "@db:5432/shop?sslmode=disable&gate_concurrent=4",
		cfgWith("postgres://app:"+testPassword+"@db:5432/shop?sslmode=disable", func(c *Config) {
			c.Concurrent, c.Queue = 4, 4
		})},
	{"URL every key between inner params",
		"postgresql://app:pw@db.example.com/shop?gate_driver=postgres&sslmode=require&gate_max_conns=20" +
			"&application_name=web&gate_concurrent=8&gate_queue=0&gate_queue_wait=250ms" +
			"&gate_max_conn_lifetime=0s&gate_max_conn_idle_time=5m",
		Config{Driver: "postgres", DSN: "postgresql://app:pw@db.example.com/shop?sslmode=require&application_name=web",
			MaxConns: 20, Concurrent: 8, Queue: None, QueueWait: 250 * time.Millisecond,
			MaxConnLifetime: None, MaxConnIdleTime: 5 * time.Minute}},
	{"concurrent above the default max_conns raises max_conns",
		"postgres://db/shop?sslmode=disable&gate_concurrent=16&gate_queue=8",
		cfgWith("postgres://db/shop?sslmode=disable", func(c *Config) {
			c.MaxConns, c.Concurrent, c.Queue = 16, 16, 8
		})},
	{"adaptive queue order", "postgres://db/shop?gate_queue_order=adaptive",
		cfgWith("postgres://db/shop", func(c *Config) { c.QueueOrder = QueueAdaptive })},
	{"fifo queue order is the default", "host=db gate_queue_order=fifo", cfgWith("host=db", nil)},
	{"workloads take their B from the default's", "postgres://db/shop?gate_workloads=batch:2,report:1:0:50ms&gate_queue_wait=20ms",
		cfgWith("postgres://db/shop", func(c *Config) {
			c.Concurrent, c.Queue, c.QueueWait = 7, 7, 20*time.Millisecond
			c.Workloads = []Workload{{Name: "batch", Concurrent: 2, Queue: 2, QueueWait: 20 * time.Millisecond}, {Name: "report", Concurrent: 1, Queue: None, QueueWait: 50 * time.Millisecond}}
		})},
	{"workloads raise max_conns under a set concurrent", "gate_concurrent=10 gate_workloads=batch:4:8 host=db",
		cfgWith("host=db", func(c *Config) {
			c.MaxConns, c.Concurrent, c.Queue = 14, 10, 10
			c.Workloads = []Workload{{Name: "batch", Concurrent: 4, Queue: 8, QueueWait: time.Second}}
		})},
	{"workload options", "host=db gate_workloads=batch:2:2::lend,report:3:1:50ms:auto:lend",
		cfgWith("host=db", func(c *Config) {
			c.Concurrent, c.Queue = 5, 5
			c.Workloads = []Workload{{Name: "batch", Concurrent: 2, Queue: 2, QueueWait: time.Second, Lend: true},
				{Name: "report", Concurrent: 3, Queue: 1, QueueWait: 50 * time.Millisecond, Auto: true, Lend: true}}
		})},
	{"auto concurrency", "host=db gate_concurrent=auto gate_concurrent_min=2 gate_workloads=batch:2",
		cfgWith("host=db", func(c *Config) {
			c.Concurrent, c.Queue, c.ConcurrentAuto, c.ConcurrentMin = 8, 8, true, 2
			c.Workloads = []Workload{{Name: "batch", Concurrent: 2, Queue: 2, QueueWait: time.Second}}
		})},
	{"gate_name", "host=db gate_name=orders", cfgWith("host=db", func(c *Config) { c.Name = "orders" })},
	{"fixed statement and lock timeouts", "postgres://db/shop?gate_statement_timeout=200ms&gate_lock_timeout=1s",
		cfgWith("postgres://db/shop", func(c *Config) { c.StatementTimeout, c.LockTimeout = 200*time.Millisecond, time.Second })},
	{"statement timeout from the deadline", "host=db gate_statement_timeout=deadline",
		cfgWith("host=db", func(c *Config) { c.StatementDeadline = true })},
	{"statement timeout from the deadline with a cap", "host=db gate_statement_timeout=deadline:5s gate_lock_timeout=off",
		cfgWith("host=db", func(c *Config) { c.StatementDeadline, c.StatementTimeout = true, 5*time.Second })},
	{"timeouts off", "host=db gate_statement_timeout=off gate_lock_timeout=0", cfgWith("host=db", nil)},
	{"URL only gate keys drops the question mark", "postgres://db/shop?gate_queue=3",
		cfgWith("postgres://db/shop", func(c *Config) { c.Queue = 3 })},
	{"URL fragment kept", "postgres://db/shop?a=1&gate_queue=3#frag",
		cfgWith("postgres://db/shop?a=1#frag", func(c *Config) { c.Queue = 3 })},
	{"URL fragment kept after dropped query", "postgres://db/shop?gate_queue=3#frag",
		cfgWith("postgres://db/shop#frag", func(c *Config) { c.Queue = 3 })},
	{"URL gate key in fragment is not a key", "postgres://db/shop#?gate_queue=3",
		cfgWith("postgres://db/shop#?gate_queue=3", nil)},
	{"URL percent-encoded password kept byte for byte",
		"postgres://app:s3cr3t%2Fpw%3F%26gate_queue%3D9%40@db/shop?gate_concurrent=2",
		cfgWith("postgres://app:s3cr3t%2Fpw%3F%26gate_queue%3D9%40@db/shop", func(c *Config) {
			c.Concurrent, c.Queue = 2, 2
		})},
	{"URL raw params kept byte for byte",
		"postgres://db/shop?options=-c%20search_path%3Dx&a=b+c&&gate_queue=1&z&q=x?y",
		cfgWith("postgres://db/shop?options=-c%20search_path%3Dx&a=b+c&&z&q=x?y", func(c *Config) { c.Queue = 1 })},
	{"URL percent-encoded gate key and value", "postgres://db/shop?gate%5Fqueue=1%32&gate_driver=my%2Bdrv+x",
		cfgWith("postgres://db/shop", func(c *Config) { c.Queue, c.Driver = 12, "my+drv x" })},
	{"URL look-alike keys are not gate keys", "postgres://db/shop?gate=1&gatekeeper=x&gat_queue=3",
		cfgWith("postgres://db/shop?gate=1&gatekeeper=x&gat_queue=3", nil)},
	{"URL empty query kept when a param is left", "postgres://db/shop?&gate_queue=1",
		cfgWith("postgres://db/shop?", func(c *Config) { c.Queue = 1 })},
	{"URL '@' in query", "postgres://u@db/shop?user=a@b&gate_queue=1",
		cfgWith("postgres://u@db/shop?user=a@b", func(c *Config) { c.Queue = 1 })},
	{"sqlserver URL", "sqlserver://sa:pw@db?database=shop&gate_driver=sqlserver&gate_concurrent=2",
		cfgWith("sqlserver://sa:pw@db?database=shop", func(c *Config) {
			c.Driver, c.Concurrent, c.Queue = "sqlserver", 2, 2
		})},
	{"query only gate keys gives empty DSN", "?gate_concurrent=4",
		cfgWith("", func(c *Config) { c.Concurrent, c.Queue = 4, 4 })},
	{"sqlite URI filename", "file:demo.db?mode=memory&gate_driver=sqlite",
		cfgWith("file:demo.db?mode=memory", func(c *Config) { c.Driver = "sqlite" })},
	{"sqlite plain file with query", "demo.db?gate_driver=sqlite&_pragma=foreign_keys(1)",
		cfgWith("demo.db?_pragma=foreign_keys(1)", func(c *Config) { c.Driver = "sqlite" })},
	{"mysql DSN", "user:pass@tcp(db:3306)/shop?parseTime=true&gate_queue=3",
		cfgWith("user:pass@tcp(db:3306)/shop?parseTime=true", func(c *Config) { c.Queue = 3 })},
	{"mysql password with '?', '&', '#' and a fake key",
		"app:p?ss&gate_queue=9#x@tcp(db)/shop?gate_queue=3",
		cfgWith("app:p?ss&gate_queue=9#x@tcp(db)/shop", func(c *Config) { c.Queue = 3 })},
	{"mysql password with '?' and no query", "app:p?ss@tcp(db)/shop",
		cfgWith("app:p?ss@tcp(db)/shop", nil)},
	{"keyword/value quoted password with spaces",
		"host=localhost user=app password='se cret' gate_concurrent=4 dbname=shop",
		cfgWith("host=localhost user=app password='se cret' dbname=shop", func(c *Config) {
			c.Concurrent, c.Queue = 4, 4
		})},
	{"keyword/value escaped quote and backslash in password",
		`password='it\'s a \\ ` + testPassword + `' gate_queue=2 host=db`,
		cfgWith(`password='it\'s a \\ `+testPassword+`' host=db`, func(c *Config) { c.Queue = 2 })},
	{"keyword/value password with '?' and '://'", "host=db password=pa?ss://x gate_queue=2",
		cfgWith("host=db password=pa?ss://x", func(c *Config) { c.Queue = 2 })},
	{"keyword/value spaces around '='", "host = localhost gate_concurrent = 4 port=5432",
		cfgWith("host = localhost port=5432", func(c *Config) { c.Concurrent, c.Queue = 4, 4 })},
	{"keyword/value gate keys first", "gate_max_conns=20 gate_queue_wait=2s host=db",
		cfgWith("host=db", func(c *Config) {
			c.MaxConns, c.Concurrent, c.Queue, c.QueueWait = 20, 20, 20, 2*time.Second
		})},
	{"keyword/value other whitespace kept", "host=db\n\tgate_queue=5\nport=1",
		cfgWith("host=db\n\nport=1", func(c *Config) { c.Queue = 5 })},
	{"keyword/value quoted gate value with escapes", `host=db gate_driver='my \'drv\\x' port=1`,
		cfgWith("host=db port=1", func(c *Config) { c.Driver = `my 'drv\x` })},
	{"keyword/value gate pair right after a quoted value", "a='x'gate_queue=2 b=1",
		cfgWith("a='x'b=1", func(c *Config) { c.Queue = 2 })},
	{"keyword/value space kept before a pair glued to a quoted gate value", "host=db gate_driver='pgx'port=5432",
		cfgWith("host=db port=5432", nil)},
	{"keyword/value empty value takes the next word, as in libpq", "password= gate_queue=2",
		cfgWith("password= gate_queue=2", nil)},
	{"keyword/value only gate keys gives empty DSN", "gate_concurrent=4",
		cfgWith("", func(c *Config) { c.Concurrent, c.Queue = 4, 4 })},
	{"keyword/value without keyword start", "a b=1 gate_queue=1",
		cfgWith("a b=1", func(c *Config) { c.Queue = 1 })},
	{"max_conns sets concurrent and queue defaults", "gate_max_conns=4",
		cfgWith("", func(c *Config) { c.MaxConns, c.Concurrent, c.Queue = 4, 4, 4 })},
	{"queue follows explicit concurrent", "?gate_max_conns=20&gate_concurrent=5",
		cfgWith("", func(c *Config) { c.MaxConns, c.Concurrent, c.Queue = 20, 5, 5 })},
	{"zero queue and durations mean none", "gate_queue=0 gate_queue_wait=0 gate_max_conn_lifetime=0s gate_max_conn_idle_time=0h",
		cfgWith("", func(c *Config) { c.Queue, c.QueueWait, c.MaxConnLifetime, c.MaxConnIdleTime = None, None, None, None })},
	{"compound duration", "?gate_queue_wait=1m30s",
		cfgWith("", func(c *Config) { c.QueueWait = 90 * time.Second })},
}

var malformedDSNTests = []struct {
	name string
	in   string
	key  string // DSNError.Key; "" for a broken DSN as a whole
}{
	{"unknown key in URL", "postgres://app:" + testPassword + "@db/shop?gate_concurency=4", "gate_concurency"},
	{"unknown key in keyword/value", "password=" + testPassword + " gate_foo=1", "gate_foo"},
	{"unparsable int", "postgres://app:" + testPassword + "@db/shop?gate_max_conns=ten", keyMaxConns},
	{"fractional int", "password=" + testPassword + " gate_queue=1.5", keyQueue},
	{"int overflow", "password=" + testPassword + " gate_queue=99999999999999999999999", keyQueue},
	{"duration without unit", "password=" + testPassword + " gate_queue_wait=5", keyQueueWait},
	{"unparsable duration", "postgres://app:" + testPassword + "@db/shop?gate_max_conn_lifetime=forever", keyMaxConnLifetime},
	{"negative max_conns", "password=" + testPassword + " gate_max_conns=-2", keyMaxConns},
	{"sum of B above max_conns", "password=" + testPassword + " gate_max_conns=10 gate_concurrent=9 gate_workloads=batch:2", keyWorkloads},
	{"workloads leave the default nothing", "password=" + testPassword + " gate_max_conns=4 gate_workloads=batch:4", keyWorkloads},
	{"workload without B", "password=" + testPassword + " gate_workloads=batch", keyWorkloads},
	{"workload with B zero", "password=" + testPassword + " gate_workloads=batch:0", keyWorkloads},
	{"workload with bad wait", "password=" + testPassword + " gate_workloads=batch:1:1:soon", keyWorkloads},
	{"workload with an unknown option", "password=" + testPassword + " gate_workloads=batch:1:1:1s:x", keyWorkloads},
	{"workload with an option twice", "password=" + testPassword + " gate_workloads=batch:1:1:1s:lend:lend", keyWorkloads},
	{"auto with a minimum above the ceiling", "password=" + testPassword + " gate_max_conns=4 gate_concurrent=auto gate_concurrent_min=5", keyConcurrentMin},
	{"duplicate workload", "password=" + testPassword + " gate_workloads=batch:1,batch:2", keyWorkloads},
	{"empty workload name", "password=" + testPassword + " gate_workloads=:1", keyWorkloads},
	{"empty workload item", "password=" + testPassword + " gate_workloads=batch:1,", keyWorkloads},
	{"workload named default", "password=" + testPassword + " gate_workloads=default:1", keyWorkloads},
	{"empty gate_name", "postgres://app:" + testPassword + "@db/shop?gate_name=", keyName},
	{"bad statement timeout", "password=" + testPassword + " gate_statement_timeout=soon", keyStmtTimeout},
	{"negative statement timeout", "password=" + testPassword + " gate_statement_timeout=-1s", keyStmtTimeout},
	{"bad deadline cap", "password=" + testPassword + " gate_statement_timeout=deadline:0s", keyStmtTimeout},
	{"deadline without colon", "password=" + testPassword + " gate_statement_timeout=deadline5s", keyStmtTimeout},
	{"bad lock timeout", "password=" + testPassword + " gate_lock_timeout=deadline", keyLockTimeout},
	{"timeouts with a non-PostgreSQL driver", "password=" + testPassword + " gate_driver=mysql gate_lock_timeout=1s", keyLockTimeout},
	{"negative concurrent", "password=" + testPassword + " gate_concurrent=-1", keyConcurrent},
	{"negative queue", "postgres://app:" + testPassword + "@db/shop?gate_queue=-1", keyQueue},
	{"negative queue_wait", "password=" + testPassword + " gate_queue_wait=-1s", keyQueueWait},
	{"negative lifetime", "password=" + testPassword + " gate_max_conn_lifetime=-1h", keyMaxConnLifetime},
	{"negative idle time", "password=" + testPassword + " gate_max_conn_idle_time=-1m", keyMaxConnIdleTime},
	{"unknown queue order", "password=" + testPassword + " gate_queue_order=lifo", keyQueueOrder},
	{"concurrent above max_conns", "password=" + testPassword + " gate_max_conns=4 gate_concurrent=5", keyConcurrent},
	{"zero max_conns", "password=" + testPassword + " gate_max_conns=0", keyMaxConns},
	{"zero concurrent", "postgres://app:" + testPassword + "@db/shop?gate_concurrent=0", keyConcurrent},
	{"duplicate key in URL", "postgres://app:" + testPassword + "@db/shop?gate_queue=1&gate_queue=2", keyQueue},
	{"duplicate key percent-encoded", "postgres://app:" + testPassword + "@db/shop?gate_queue=1&gate%5Fqueue=1", keyQueue},
	{"duplicate key in keyword/value", "password=" + testPassword + " gate_queue=1 gate_queue=1", keyQueue},
	{"driver gated", "password=" + testPassword + " gate_driver=gated", keyDriver},
	{"empty driver in URL", "postgres://app:" + testPassword + "@db/shop?gate_driver=", keyDriver},
	{"empty quoted driver", "password=" + testPassword + " gate_driver=''", keyDriver},
	{"unterminated quote in inner pair", "password='" + testPassword + " gate_queue=2", ""},
	{"unterminated quote in gate pair", "password=" + testPassword + " gate_driver='pgx", keyDriver},
	{"gate key without value", "password=" + testPassword + " gate_queue", keyQueue},
	{"gate value ending in backslash", "password=" + testPassword + ` gate_driver=x\`, keyDriver},
	{"gate key stranded in what is left", "gate_queue=1 x?password=" + testPassword + "&gate_queue_wait=1s", keyQueueWait},
	{"bad percent-escape in value", "postgres://app:" + testPassword + "@db/shop?gate_driver=pg%zz", keyDriver},
	{"bad percent-escape in key", "postgres://app:" + testPassword + "@db/shop?gate_%zz=1", "gate_%zz"},
}

func TestParseDSNStripsGateKeysAndKeepsInnerDSN(t *testing.T) {
	for _, tt := range validDSNTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDSN(tt.in)
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("ParseDSN(%q)\n got %+v\nwant %+v", tt.in, *got, tt.want)
			}
		})
	}
}

func TestParseDSNRejectsMalformedWithoutLeakingPassword(t *testing.T) {
	for _, tt := range malformedDSNTests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(tt.in, testPassword) {
				t.Fatalf("test DSN %q lacks the password", tt.in)
			}
			cfg, err := ParseDSN(tt.in)
			if err == nil {
				t.Fatalf("ParseDSN(%q) = %+v, want an error", tt.in, *cfg)
			}
			if cfg != nil {
				t.Errorf("ParseDSN(%q) returned a Config with its error", tt.in)
			}
			checkDSNError(t, err, tt.key)
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error %q contains the password", err)
			}
		})
	}
}

// checkDSNError checks the shape every error of this file must have.
func checkDSNError(t *testing.T, err error, key string) {
	t.Helper()
	var de *DSNError
	if !errors.As(err, &de) {
		t.Fatalf("error %q (%T) is not a *DSNError", err, err)
	}
	if de.Key != key {
		t.Errorf("DSNError.Key = %q, want %q (error %q)", de.Key, key, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "gated: ") {
		t.Errorf("error %q does not start with %q", msg, "gated: ")
	}
	if key != "" && !strings.Contains(msg, key) {
		t.Errorf("error %q does not name key %q", msg, key)
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		t.Errorf("error %q wraps a *url.Error, which quotes the whole URL", msg)
	}
}

func TestDSNDefaultsFormatAsNoKey(t *testing.T) {
	if got := dsnDefaults().FormatDSN(); got != "" {
		t.Errorf("the DSN defaults' FormatDSN() = %q, want \"\"", got)
	}
}

func TestCloneIsIndependent(t *testing.T) {
	c := dsnDefaults()
	c.DSN = "host=db"
	cp := c.Clone()
	if !reflect.DeepEqual(*cp, *c) {
		t.Fatalf("Clone() = %+v, want %+v", *cp, *c)
	}
	cp.Concurrent, cp.DSN = 3, "host=other"
	if c.Concurrent != 10 || c.DSN != "host=db" {
		t.Errorf("changing the clone changed the original: %+v", *c)
	}
	if (*Config)(nil).Clone() != nil {
		t.Error("(*Config)(nil).Clone() != nil")
	}
}

func TestNormalizeDefaultsZeroFieldsOfCodeBuiltConfig(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero Config", Config{}, *dsnDefaults()},
		{"concurrent follows max_conns", Config{MaxConns: 4},
			cfgWith("", func(c *Config) { c.MaxConns, c.Concurrent, c.Queue = 4, 4, 4 })},
		{"max_conns defaults under a set concurrent", Config{Concurrent: 3},
			cfgWith("", func(c *Config) { c.Concurrent, c.Queue = 3, 3 })},
		{"max_conns follows a concurrent above its default", Config{Concurrent: 20},
			cfgWith("", func(c *Config) { c.MaxConns, c.Concurrent, c.Queue = 20, 20, 20 })},
		{"zero queue and durations get the DSN defaults", Config{Driver: "postgres", DSN: "host=db", MaxConns: 2, Concurrent: 2},
			cfgWith("host=db", func(c *Config) { c.Driver, c.MaxConns, c.Concurrent, c.Queue = "postgres", 2, 2, 2 })},
		{"None queue and durations stay none", Config{MaxConns: 2, Queue: None, QueueWait: None, MaxConnLifetime: None, MaxConnIdleTime: None},
			Config{Driver: "pgx", MaxConns: 2, Concurrent: 2, Queue: None, QueueWait: None, MaxConnLifetime: None, MaxConnIdleTime: None}},
		{"defaults spelled out unchanged", *dsnDefaults(), *dsnDefaults()},
		{"concurrent equal to max_conns", Config{MaxConns: 5, Concurrent: 5, Queue: 7, QueueWait: time.Millisecond},
			cfgWith("", func(c *Config) { c.MaxConns, c.Concurrent, c.Queue, c.QueueWait = 5, 5, 7, time.Millisecond })},
		{"unreadable inner DSN left for the inner driver", Config{DSN: "password='x"}, cfgWith("password='x", nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in
			if err := c.normalize(); err != nil {
				t.Fatalf("normalize(%+v): %v", tt.in, err)
			}
			if !reflect.DeepEqual(c, tt.want) {
				t.Errorf("normalize(%+v)\n got %+v\nwant %+v", tt.in, c, tt.want)
			}
		})
	}
}

func TestNormalizeRejectsInvalidConfigUnchanged(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		key  string
	}{
		{"driver gated", Config{Driver: "gated"}, keyDriver},
		{"negative max_conns", Config{MaxConns: -1}, keyMaxConns},
		{"negative concurrent", Config{Concurrent: -1}, keyConcurrent},
		{"concurrent above max_conns", Config{MaxConns: 10, Concurrent: 11}, keyConcurrent},
		{"negative queue", Config{Queue: -2}, keyQueue},
		{"negative queue_wait", Config{QueueWait: -time.Second}, keyQueueWait},
		{"negative lifetime", Config{MaxConnLifetime: -time.Hour}, keyMaxConnLifetime},
		{"negative idle time", Config{MaxConnIdleTime: -2}, keyMaxConnIdleTime},
		{"unknown queue order", Config{QueueOrder: "lifo"}, keyQueueOrder},
		{"gate key left in keyword/value DSN", Config{DSN: "host=db password=" + testPassword + " gate_queue=2"}, keyQueue},
		{"gate key left in URL", Config{DSN: "postgres://u:" + testPassword + "@db/shop?gate_concurrent=2"}, keyConcurrent},
		{"broken gate key left in DSN", Config{DSN: "password=" + testPassword + " gate_queue"}, keyQueue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in
			err := c.normalize()
			if err == nil {
				t.Fatalf("normalize(%+v) = nil, want an error", tt.in)
			}
			checkDSNError(t, err, tt.key)
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error %q contains the password", err)
			}
			if !reflect.DeepEqual(c, tt.in) {
				t.Errorf("failed normalize changed the Config: %+v, was %+v", c, tt.in)
			}
		})
	}
}

func TestFormatDSNWritesOnlyNonDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want string
	}{
		{"defaults keep the inner DSN", cfgWith("postgres://db/shop?sslmode=disable", nil),
			"postgres://db/shop?sslmode=disable"},
		{"empty inner DSN uses keyword/value", cfgWith("", func(c *Config) { c.Concurrent, c.Queue = 4, 4 }),
			"gate_concurrent=4"},
		{"keyword/value in front", cfgWith("host=db password=", func(c *Config) { c.Concurrent, c.Queue = 4, 4 }),
			"gate_concurrent=4 host=db password="},
		{"URL appends to query", cfgWith("postgres://db/shop?sslmode=disable", func(c *Config) { c.Queue = 2 }),
			"postgres://db/shop?sslmode=disable&gate_queue=2"},
		{"URL with fragment and no query", cfgWith("postgres://db/shop#f", func(c *Config) { c.Queue = None }),
			"postgres://db/shop?gate_queue=0#f"},
		{"URL with empty query", cfgWith("postgres://db/shop?", func(c *Config) { c.Queue = None }),
			"postgres://db/shop?&gate_queue=0"},
		{"plain inner DSN gets a query", cfgWith(":memory:", func(c *Config) { c.Driver = "sqlite" }),
			":memory:?gate_driver=sqlite"},
		{"escaped in query form", cfgWith("file:x.db", func(c *Config) { c.Driver = "my drv&x" }),
			"file:x.db?gate_driver=my+drv%26x"},
		{"quoted in keyword/value form", cfgWith("host=db", func(c *Config) { c.Driver = `it's \ x` }),
			`gate_driver='it\'s \\ x' host=db`},
		{"every key in fixed order", Config{Driver: "postgres", DSN: "host=db", MaxConns: 20, Concurrent: 8, Queue: 3,
			QueueWait: 250 * time.Millisecond, MaxConnLifetime: None, MaxConnIdleTime: 90 * time.Second},
			"gate_driver=postgres gate_max_conns=20 gate_concurrent=8 gate_queue=3 gate_queue_wait=250ms " +
				"gate_max_conn_lifetime=0s gate_max_conn_idle_time=1m30s host=db"},
		{"zero-value literal has the DSN defaults", Config{DSN: "host=db"}, "host=db"},
		{"None formats as 0", Config{DSN: "host=db", Queue: None, QueueWait: None, MaxConnLifetime: None, MaxConnIdleTime: None},
			"gate_queue=0 gate_queue_wait=0s gate_max_conn_lifetime=0s gate_max_conn_idle_time=0s host=db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			got := in.FormatDSN()
			if got != tt.want {
				t.Errorf("FormatDSN(%+v)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			if !reflect.DeepEqual(in, tt.in) {
				t.Errorf("FormatDSN changed the Config to %+v", in)
			}
			// What FormatDSN writes is what NewConnector would run with.
			want := tt.in
			if err := want.normalize(); err != nil {
				t.Fatalf("normalize: %v", err)
			}
			back, err := ParseDSN(got)
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", got, err)
			}
			if !reflect.DeepEqual(*back, want) {
				t.Errorf("ParseDSN(%q)\n got %+v\nwant %+v", got, *back, want)
			}
		})
	}
}

func TestFormatDSNRoundTrips(t *testing.T) {
	for _, tt := range validDSNTests {
		t.Run(tt.name, func(t *testing.T) {
			checkRoundTrip(t, tt.in)
		})
	}
}

// checkRoundTrip checks Parse → Format → Parse for a DSN that parses, and returns false when it
// does not parse.
func checkRoundTrip(t *testing.T, dsn string) bool {
	t.Helper()
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return false
	}
	s := cfg.FormatDSN()
	cfg2, err := ParseDSN(s)
	if err != nil {
		t.Fatalf("ParseDSN(%q) = %+v, FormatDSN = %q, which fails to parse: %v", dsn, *cfg, s, err)
	}
	if !reflect.DeepEqual(*cfg2, *cfg) {
		t.Fatalf("ParseDSN(%q)\n   = %+v\nFormatDSN = %q\nParseDSN = %+v", dsn, *cfg, s, *cfg2)
	}
	if s2 := cfg2.FormatDSN(); s2 != s {
		t.Fatalf("FormatDSN not stable for %q: %q then %q", dsn, s, s2)
	}
	// The inner DSN holds no gate key and reads back as itself.
	inner, err := ParseDSN(cfg.DSN)
	if err != nil {
		t.Fatalf("ParseDSN(inner DSN %q of %q): %v", cfg.DSN, dsn, err)
	}
	if inner.DSN != cfg.DSN {
		t.Fatalf("inner DSN %q of %q parses to inner DSN %q", cfg.DSN, dsn, inner.DSN)
	}
	return true
}

func FuzzParseDSN(f *testing.F) {
	seeds := make(map[string]bool)
	for _, tt := range validDSNTests {
		seeds[tt.in] = true
	}
	for _, tt := range malformedDSNTests {
		seeds[tt.in] = true
	}
	for s := range seeds {
		f.Add(s)
	}
	// Shapes where cutting a pair could change how the rest reads.
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
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		cfg, err := ParseDSN(dsn)
		if err != nil {
			var de *DSNError
			if !errors.As(err, &de) {
				t.Fatalf("ParseDSN(%q): error %q (%T) is not a *DSNError", dsn, err, err)
			}
			// The password check only on the seeds: a mutated DSN can put the password anywhere.
			password := ""
			if seeds[dsn] {
				password = testPassword
			}
			checkDSNErrorSafe(t, dsn, err, password)
			if cfg != nil {
				t.Fatalf("ParseDSN(%q) returned a Config with its error", dsn)
			}
			return
		}
		if len(cfg.DSN) > len(dsn) {
			t.Fatalf("ParseDSN(%q): inner DSN %q is longer than the DSN", dsn, cfg.DSN)
		}
		checkRoundTrip(t, dsn)
	})
}

// A gate_ key in another case is a misspelt gate key: forwarded, it would reach the server as a
// setting (pgx and lib/pq pass unknown keys on) and fail there, far from the mistake.
func TestParseDSNRefusesGateKeysNotInLowerCase(t *testing.T) {
	for _, dsn := range []string{
		"postgres://db/shop?GATE_CONCURRENT=4",
		"postgres://db/shop?sslmode=disable&Gate_queue=2",
		"host=db GATE_CONCURRENT=4",
		"gate_Queue=1 host=db",
	} {
		_, err := ParseDSN(dsn)
		var de *DSNError
		if !errors.As(err, &de) || !strings.EqualFold(de.Key[:len(gatePrefix)], gatePrefix) || !strings.Contains(err.Error(), "lower case") {
			t.Errorf("ParseDSN(%q) = %v, want a *DSNError naming the key and saying gate_ keys are lower case", dsn, err)
		}
	}
}

func TestParseDSNReadsGatePoolerAndFormatsItBack(t *testing.T) {
	cfg, err := ParseDSN("postgres://h/db?default_query_exec_mode=exec&gate_pooler=transaction")
	if err != nil || cfg.Pooler != PoolerTransaction {
		t.Fatalf("ParseDSN: %+v, %v; want Pooler %q", cfg, err, PoolerTransaction)
	}
	again, err := ParseDSN(cfg.FormatDSN())
	if err != nil || !reflect.DeepEqual(again, cfg) {
		t.Errorf("ParseDSN(FormatDSN()) = %+v, %v; want %+v", again, err, cfg)
	}
	if cfg, err := ParseDSN("postgres://h/db?gate_pooler=none"); err != nil || cfg.Pooler != "" {
		t.Errorf("gate_pooler=none: %+v, %v", cfg, err)
	}
}

func TestParseDSNSuggestsTheNearestKeyForAMisspelledOne(t *testing.T) {
	const url = "postgres://app:" + testPassword + "@db/shop?sslmode=disable&"
	const kv = "host=db user=app password=" + testPassword + " "
	for _, tc := range []struct {
		name, dsn, key, suggest string // suggest "": no suggestion
	}{
		{"URL, one letter missing", url + "gate_concurency=4", "gate_concurency", keyConcurrent},
		{"keyword/value, one letter missing", kv + "gate_concurency=4", "gate_concurency", keyConcurrent},
		{"URL, an underscore missing", url + "gate_maxconns=4", "gate_maxconns", keyMaxConns},
		{"keyword/value, a letter swapped", kv + "gate_fleet_tll=1s", "gate_fleet_tll", keyFleetTTL},
		{"keyword/value, singular", kv + "gate_workload=batch:1", "gate_workload", keyWorkloads},
		{"URL, nothing near", url + "gate_timeout=1s", "gate_timeout", ""},
		{"keyword/value, nothing near", kv + "gate_x=1", "gate_x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDSN(tc.dsn)
			var de *DSNError
			if !errors.As(err, &de) || de.Key != tc.key {
				t.Fatalf("ParseDSN(%q) error %v, want a *DSNError for %s", tc.dsn, err, tc.key)
			}
			msg := err.Error()
			if strings.Contains(msg, testPassword) || strings.Contains(msg, testPassword[:4]) {
				t.Errorf("error %q contains (part of) the password", msg)
			}
			if !strings.Contains(msg, "(known: "+keyNames()+")") {
				t.Errorf("error %q does not list the known keys", msg)
			}
			hint := "did you mean"
			switch {
			case tc.suggest != "" && !strings.Contains(msg, hint+" "+tc.suggest+"?"):
				t.Errorf("error %q does not ask %q", msg, hint+" "+tc.suggest+"?")
			case tc.suggest == "" && strings.Contains(msg, hint):
				t.Errorf("error %q suggests a key where none is near", msg)
			}
		})
	}
}
