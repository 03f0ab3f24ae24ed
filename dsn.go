package gated

import (
	"errors"
	"fmt"
	"iter"
	"net/url"
	"strconv"
	"strings"
)

var (
	errRepeatedKey  = errors.New("key given more than once")
	errMissingValue = errors.New(`missing "=" and value`)
	errUnterminated = errors.New("unterminated quoted value")
	errBackslashEnd = errors.New("value ends with a lone backslash")
	errStrandedKey  = errors.New("cannot be taken out: what is left for the inner driver would still hold it")
	errStrandedForm = errors.New("cannot be taken out: what is left for the inner driver would be a keyword/value DSN that cannot be read")
)

// ParseDSN reads the gate_ keys out of dsn and returns a Config whose DSN field is the rest of
// dsn, for the inner driver, with every other byte unchanged. The keys, all optional:
//
//   - gate_driver: inner database/sql driver name, not "gated" (default "pgx"). Whether it is
//     registered is checked by [NewConnector], not here.
//   - gate_max_conns: P, physical connections, an integer ≥ 1 (default 10).
//   - gate_concurrent: B, execution permits, an integer from 1 to gate_max_conns (default
//     gate_max_conns), or "auto": the limit moves between gate_concurrent_min and that default
//     from the database's service times (see [Config.ConcurrentAuto]).
//   - gate_concurrent_min: the lowest limit of gate_concurrent=auto and of workloads with the
//     option auto, an integer ≥ 1 (default 1).
//   - gate_queue: Q, admission permits beyond B, an integer ≥ 0 (default gate_concurrent; 0
//     means no queue).
//   - gate_queue_wait: longest wait for an execution permit, a Go duration ≥ 0 such as 250ms
//     (default 1s; 0 means try once).
//   - gate_max_conn_lifetime, gate_max_conn_idle_time: Go durations ≥ 0 (defaults 1h and 30m;
//     0 means no limit).
//   - gate_max_conn_lifetime_jitter: a Go duration ≥ 0; each physical connection lives
//     gate_max_conn_lifetime plus a random part of it (default a tenth of
//     gate_max_conn_lifetime; 0 means none). See [Config.MaxConnLifetimeJitter].
//   - gate_queue_order: "fifo" (default) or "adaptive" ([QueueAdaptive]).
//   - gate_workloads: named gates beside the default one, "name:B[:Q[:wait[:auto][:lend]]],..."
//     (default none; Q defaults to B, wait to gate_queue_wait; auto makes B a ceiling, lend
//     lends idle permits to the other gates; see [Workload]). With workloads,
//     gate_concurrent defaults to gate_max_conns minus their B, and gate_max_conns, when not
//     given, grows to the sum of all B. The sum of all B above gate_max_conns is an error.
//   - gate_name: share the gates and the pool with every Connector of this process of the same
//     name (default none); also the connections' application_name when dsn sets none.
//   - gate_statement_timeout: "off" (default, also 0), a Go duration > 0, "deadline" (the
//     context's remaining time) or "deadline:<dur>" (the smaller of the two; dur without a
//     deadline). See [Config.StatementTimeout].
//   - gate_lock_timeout: "off" (default, also 0) or a Go duration > 0.
//   - gate_pooler: "none" (default) or "transaction" ([PoolerTransaction]): the DSN points at a
//     pooler in transaction mode.
//   - gate_fleet: "off" (default) or "on": the budgets are the totals of every live instance
//     with this gate_name on the database, each running with its share ([Config.Fleet]);
//     NewConnector requires a gate_name with it.
//   - gate_fleet_table: the fleet's lease table (default "gated_fleet"), gate_fleet_ttl: a
//     lease's life by the database's clock (default 15s), gate_fleet_refresh: how often a
//     lease is refreshed, at most a third of gate_fleet_ttl (default 5s).
//
// Two forms of dsn are understood:
//
//   - Query form, for a dsn that contains "://" or '?' (URLs, and DSNs like mysql's
//     "user:pw@tcp(h)/db?parseTime=true" or SQLite's "file:x.db?mode=ro"): the keys are query
//     parameters, percent-encoded like any other. The query starts at the first '?' after the
//     authority of a "scheme://" dsn, and otherwise at the first '?' after the last '@', so that
//     a mysql password may contain '?'; a raw '@' in the query of such a dsn must therefore be
//     written %40. The '?' is dropped when only gate_ keys followed it; a #fragment is kept.
//   - Keyword/value form (libpq), for a dsn that starts with "keyword=" or otherwise contains '='
//     but neither "://" nor '?': whitespace-separated key=value pairs, values optionally in single
//     quotes with \' and \\ escapes ("password='se cret' gate_concurrent=4"). A dsn starting with
//     "keyword=" is in this form even when a value contains '?' or "://".
//
// Any other dsn (":memory:", "") has no gate_ keys and passes through unchanged.
//
// Where a key's 0 means "none" (gate_queue, gate_queue_wait, the connection lifetimes), the
// Config gets [None] for it, since a zero field means the default: the Config ParseDSN returns,
// a literal with the same fields and the DSN [Config.FormatDSN] writes all give the same gate.
// pgxpool's pool_ keys (pool_max_conns, ...) are refused with gate_driver pgx, postgres and
// mysql, naming the gate_ key to use instead: the inner driver would send them to the server as
// settings, which fails the first connection.
//
// Every error is a *[DSNError] naming the gate_ (or pool_) key at fault, or with an empty Key when the
// keyword/value syntax itself is broken; its message holds at most that key and its value, never
// the rest of dsn. An unknown or repeated gate_ key is an error. ParseDSN returns a nil Config
// with any error. It is safe for concurrent use.
func ParseDSN(dsn string) (*Config, error) {
	inner, params, err := splitParams(dsn, isGateKey)
	if err != nil {
		return nil, err
	}
	if len(params) > 0 && dsnFormOf(inner) == formKV && dsnFormOf(dsn) != formKV {
		// Taking the keys out changed the form of what is left ("0='?gate_queue=0" leaves the
		// keyword/value "0='"): it must still read as a DSN of its new form.
		if _, _, err := splitParams(inner, isGateKey); err != nil {
			return nil, &DSNError{Key: params[0].key, Err: errStrandedForm}
		}
	}
	c := &Config{DSN: inner}
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if lower := strings.ToLower(p.key); lower != p.key {
			return nil, &DSNError{Key: p.key, Err: fmt.Errorf("gate_ keys are lower case (%s)", lower)}
		}
		if seen[p.key] {
			return nil, &DSNError{Key: p.key, Err: errRepeatedKey}
		}
		seen[p.key] = true
		if err := c.set(p.key, p.value); err != nil {
			return nil, &DSNError{Key: p.key, Err: err}
		}
	}
	// The keys not given are zero fields, which normalize defaults as for a Config literal.
	if err := c.normalize(); err != nil {
		// Taking keys out can change the form of what is left ("gate_queue=1 x?gate_queue_wait=1s"
		// leaves a query); normalize's advice to use ParseDSN would not help here.
		if de, ok := err.(*DSNError); ok && de.Err == errInnerGateKey {
			de.Err = errStrandedKey
		}
		return nil, err
	}
	return c, nil
}

// FormatDSN returns c.DSN with c's gate_ keys added, in a DSN that [ParseDSN] turns back into a
// Config equal to c once normalized (for a c that [NewConnector] accepts): the same gate. It
// writes only the keys whose value differs from what ParseDSN would default it to, in a fixed
// order, after filling in the defaults of c's zero fields as NewConnector does; a None is written
// 0. The keys go in front of a keyword/value or empty c.DSN ("gate_concurrent=4 host=db") and
// into the query of any other ("postgres://db/app?sslmode=require&gate_concurrent=4"). Observer,
// Logger and the pgx hooks have no key and are not written. FormatDSN does not validate c and
// does not change it.
func (c *Config) FormatDSN() string {
	d := c.Clone()
	d.fillDefaults()
	var buf [len(dsnKeys)]gateParam
	params := buf[:0]
	for _, k := range dsnKeys {
		if v, isDefault := k.get(d); !isDefault {
			params = append(params, gateParam{k.name, v})
		}
	}
	if len(params) == 0 {
		return c.DSN
	}

	var b strings.Builder
	if c.DSN == "" || dsnFormOf(c.DSN) == formKV {
		// In front, not behind: a trailing "password=" would take the next word as its value.
		for _, p := range params {
			b.WriteString(p.key)
			b.WriteByte('=')
			writeKVValue(&b, p.value)
			b.WriteByte(' ')
		}
		if c.DSN == "" {
			return b.String()[:b.Len()-1]
		}
		b.WriteString(c.DSN)
		return b.String()
	}
	q, frag := queryBounds(c.DSN)
	b.WriteString(c.DSN[:frag])
	sep := byte('?')
	if q >= 0 {
		// Even after an empty query ("db?"): ParseDSN keeps the '?' only while a parameter,
		// even an empty one, is left, so "db?&gate_queue=1" is what reads back as "db?".
		sep = '&'
	}
	for _, p := range params {
		b.WriteByte(sep)
		sep = '&'
		b.WriteString(p.key)
		b.WriteByte('=')
		// QueryEscape also escapes '@', '/', '?' and '#', so the added text cannot move the
		// query's start or the fragment that queryBounds finds.
		b.WriteString(url.QueryEscape(p.value))
	}
	b.WriteString(c.DSN[frag:])
	return b.String()
}

// gateParam is one gate_ key and its decoded value.
type gateParam struct{ key, value string }

type dsnForm int

const (
	formPlain dsnForm = iota // neither form: no gate_ keys possible
	formQuery
	formKV
)

// dsnFormOf tells which form dsn is in. A leading "keyword=" wins over '?' and "://" because
// libpq and pgx read such a DSN as keyword/value whatever its values contain (a password may
// hold a '?'), while no URL and no mysql DSN starts with "word=".
func dsnFormOf(dsn string) dsnForm {
	switch {
	case startsWithKeyword(dsn):
		return formKV
	case strings.Contains(dsn, "://") || strings.IndexByte(dsn, '?') >= 0:
		return formQuery
	case strings.IndexByte(dsn, '=') >= 0:
		return formKV
	}
	return formPlain
}

// startsWithKeyword reports whether s starts with an identifier and '=', spaces allowed.
func startsWithKeyword(s string) bool {
	i := skipSpace(s, 0)
	start := i
	for i < len(s) && (s[i] == '_' || 'a' <= s[i] && s[i] <= 'z' || 'A' <= s[i] && s[i] <= 'Z' ||
		i > start && '0' <= s[i] && s[i] <= '9') {
		i++
	}
	if i == start {
		return false
	}
	i = skipSpace(s, i)
	return i < len(s) && s[i] == '='
}

// splitParams returns dsn without the keys for which ours reports true (isGateKey: gated's
// own), and those keys in the order given.
func splitParams(dsn string, ours func(key string) bool) (inner string, params []gateParam, err error) {
	switch dsnFormOf(dsn) {
	case formKV:
		return splitKV(dsn, ours)
	case formQuery:
		return splitQuery(dsn, ours)
	}
	return dsn, nil, nil
}

// queryBounds returns the index of the '?' that starts dsn's query (-1 if none) and the index
// of the '#' that starts its fragment (len(dsn) if none). Without a query, frag is where one
// would be inserted.
func queryBounds(dsn string) (q, frag int) {
	start := 0
	if i := strings.Index(dsn, "://"); i >= 0 {
		start = i + len("://")
		if j := strings.IndexAny(dsn[start:], "/?#"); j >= 0 {
			start += j
		} else {
			start = len(dsn)
		}
	} else if i := strings.LastIndexByte(dsn, '@'); i >= 0 {
		// user:password@...: a password may contain '?' and '#'.
		start = i + 1
	}
	j := strings.IndexAny(dsn[start:], "?#")
	if j < 0 {
		return -1, len(dsn)
	}
	j += start
	if dsn[j] == '#' {
		return -1, j
	}
	if k := strings.IndexByte(dsn[j+1:], '#'); k >= 0 {
		return j, j + 1 + k
	}
	return j, len(dsn)
}

// splitQuery is splitParams for the query form. The other parameters stay exactly as
// written, percent-encoding included, because each inner driver decodes its DSN its own way.
func splitQuery(dsn string, ours func(string) bool) (string, []gateParam, error) {
	q, frag := queryBounds(dsn)
	if q < 0 {
		return dsn, nil, nil
	}
	var params []gateParam
	var kept []string
	for part := range strings.SplitSeq(dsn[q+1:frag], "&") {
		rawKey, rawValue, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			if ours(rawKey) {
				return "", nil, &DSNError{Key: rawKey, Err: fmt.Errorf("bad percent-encoding in key: %w", err)}
			}
			kept = append(kept, part) // not ours to judge
			continue
		}
		if !ours(key) {
			kept = append(kept, part)
			continue
		}
		value, err := url.QueryUnescape(rawValue)
		if err != nil {
			return "", nil, &DSNError{Key: key, Err: fmt.Errorf("bad percent-encoding in value: %w", err)}
		}
		params = append(params, gateParam{key, value})
	}
	if len(params) == 0 {
		return dsn, nil, nil
	}
	var b strings.Builder
	b.Grow(len(dsn))
	b.WriteString(dsn[:q])
	if len(kept) > 0 {
		b.WriteByte('?')
		b.WriteString(strings.Join(kept, "&"))
	}
	b.WriteString(dsn[frag:])
	return b.String(), params, nil
}

// A kvToken is one pair of a keyword/value DSN as libpq's tokenizer reads it: a key runs to
// whitespace or '='; whitespace may surround '='; a value is either quoted, ending at the first
// single quote not escaped by a backslash, or bare, ending at whitespace; in both a backslash
// escapes the next byte (unescapeKV). An empty value takes the next word, as in libpq.
type kvToken struct {
	key        string
	start      int    // where the key begins
	valueStart int    // where the value begins, its opening quote included
	end        int    // just past the value, its closing quote included
	raw        string // the value as written, without its quotes, still escaped
	// problem is nil, errMissingValue (a word without '='; the value is empty),
	// errUnterminated (a quote that never closes; raw runs to the end of the DSN) or
	// errBackslashEnd (a bare value whose last byte is a lone backslash; raw runs to the end).
	problem error
}

// kvTokens yields the pairs of a keyword/value DSN, in order. Its callers decide what a problem
// means: ParseDSN refuses it in a gate_ pair, the redactor reads on.
func kvTokens(dsn string) iter.Seq[kvToken] {
	return func(yield func(kvToken) bool) {
		n := len(dsn)
		for i := skipSpace(dsn, 0); i < n; i = skipSpace(dsn, i) {
			t := kvToken{start: i}
			for i < n && !isKVSpace(dsn[i]) && dsn[i] != '=' {
				i++
			}
			t.key = dsn[t.start:i]
			eq := skipSpace(dsn, i)
			if eq == n || dsn[eq] != '=' {
				t.valueStart, t.end, t.problem = i, i, errMissingValue
				if !yield(t) {
					return
				}
				continue
			}
			i = skipSpace(dsn, eq+1)
			t.valueStart = i
			if i < n && dsn[i] == '\'' {
				i++
				vstart := i
				for i < n && dsn[i] != '\'' {
					if dsn[i] == '\\' {
						i++
					}
					i++
				}
				if i >= n {
					i, t.problem = n, errUnterminated
					t.raw = dsn[vstart:]
				} else {
					t.raw = dsn[vstart:i]
					i++
				}
			} else {
				vstart := i
				for i < n && !isKVSpace(dsn[i]) {
					if dsn[i] == '\\' {
						i++
					}
					i++
				}
				if i > n {
					i, t.problem = n, errBackslashEnd
				}
				t.raw = dsn[vstart:i]
			}
			t.end = i
			if !yield(t) {
				return
			}
		}
	}
}

// splitKV is splitParams for the keyword/value form (kvTokens). A word without '=' is left for
// the inner driver to reject unless it is a gate_ key. Each gate_ pair is cut out with one
// adjacent whitespace byte.
func splitKV(dsn string, ours func(string) bool) (string, []gateParam, error) {
	var params []gateParam
	var cuts [][2]int
	n := len(dsn)
	for t := range kvTokens(dsn) {
		gate := ours(t.key)
		switch {
		case t.problem != nil && gate:
			return "", nil, &DSNError{Key: t.key, Err: t.problem}
		case t.problem == errUnterminated:
			// Naming the key could quote a password: in "password=se cret='x" the key would
			// be "cret".
			return "", nil, &DSNError{Err: errors.New("unterminated quoted value in keyword/value DSN")}
		case gate:
			params = append(params, gateParam{t.key, unescapeKV(t.raw)})
			cuts = append(cuts, [2]int{t.start, t.end})
		}
	}
	if len(params) == 0 {
		return dsn, nil, nil
	}
	var b strings.Builder
	b.Grow(len(dsn))
	prev := 0
	for _, cut := range cuts {
		s, e := cut[0], cut[1]
		// One separating byte goes with the pair, so FormatDSN's "gate_x=1 " + inner reads back
		// exactly: the one before it unless an earlier cut took that, else the one after.
		switch {
		case e < n && !isKVSpace(dsn[e]):
			// A quoted value ended the pair and the next pair starts right after it: the
			// space before must stay, or "a=0 gate_x='1'=b" would become "a=0=b".
		case s > prev && isKVSpace(dsn[s-1]):
			s--
		case e < n:
			e++
		}
		b.WriteString(dsn[prev:s])
		prev = e
	}
	b.WriteString(dsn[prev:])
	return b.String(), params, nil
}

// unescapeKV drops every escaping backslash, as libpq and pgx read a keyword/value value: a
// backslash takes the next byte literally.
func unescapeKV(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			if i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// writeKVValue writes v so that splitKV reads it back unchanged.
func writeKVValue(b *strings.Builder, v string) {
	if v != "" && !strings.ContainsAny(v, " \t\n\v\f\r'\\") {
		b.WriteString(v)
		return
	}
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' || v[i] == '\'' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('\'')
}

// isGateKey reports whether key belongs to gated. The prefix is matched in any case, so that a
// misspelt GATE_CONCURRENT is refused instead of being forwarded to the server as a setting.
func isGateKey(key string) bool {
	return len(key) >= len(gatePrefix) && strings.EqualFold(key[:len(gatePrefix)], gatePrefix)
}

func isKVSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func skipSpace(s string, i int) int {
	for i < len(s) && isKVSpace(s[i]) {
		i++
	}
	return i
}

// shownValue quotes a gate_ value for an error message, unless it may hold another key's value: in
// keyword/value form "gate_queue= password=secret" gives gate_queue the value "password=secret",
// as libpq reads it, and an error must not repeat that.
func shownValue(v string) string {
	if strings.ContainsAny(v, "= \t\n\r\\'") {
		return "(not shown: it contains '=', a quote, a backslash or a space; is a value missing?)"
	}
	return strconv.Quote(v)
}
