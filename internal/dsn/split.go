package dsn

import (
	"errors"
	"fmt"
	"iter"
	"net/url"
	"strings"
)

// A Param is one key taken out of a DSN, with its value decoded.
type Param struct{ Key, Value string }

// form is the form of a DSN.
type form int

// The forms of a DSN.
const (
	formPlain form = iota // neither form: no key can be taken out (":memory:", "")
	formQuery             // query parameters: URLs, mysql DSNs, "file:x.db?mode=ro"
	formKV                // libpq's keyword/value pairs
)

// formOf tells which form dsn is in: keyword/value for a dsn that starts with "keyword=", or
// otherwise contains '=' but neither "://" nor '?'; query for any other dsn with "://" or '?'. A
// leading "keyword=" wins over '?' and "://" because libpq and pgx read such a DSN as
// keyword/value whatever its values contain (a password may hold a '?'), while no URL and no
// mysql DSN starts with "word=".
func formOf(dsn string) form {
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

// Prefixed returns a predicate for Split: whether a key starts with prefix, in any case, so that
// a misspelt GATE_CONCURRENT is taken out (and refused by the caller) instead of being forwarded
// to the server as a setting.
func Prefixed(prefix string) func(key string) bool {
	return func(key string) bool {
		return len(key) >= len(prefix) && strings.EqualFold(key[:len(prefix)], prefix)
	}
}

// Split returns dsn without the keys for which ours reports true, and those keys with their
// decoded values in the order given. Every other byte of dsn stays as written.
//
//   - Query form: the keys are query parameters, percent-encoded like any other. The query starts
//     at the first '?' after the authority of a "scheme://" dsn, and otherwise at the first '?'
//     after the last '@', so that a mysql password may contain '?'. The '?' is dropped when only
//     keys taken out followed it; a #fragment is kept.
//   - Keyword/value form: whitespace-separated key=value pairs as libpq reads them, values
//     optionally in single quotes with \' and \\ escapes. Each pair taken out goes with one
//     adjacent whitespace byte.
//   - Any other dsn has no keys and passes through unchanged.
//
// When taking the keys out turns a query-form dsn into keyword/value ("0='?gate_queue=0" leaves
// "0='"), what is left must read as keyword/value too. Every error is an *Error naming a key
// taken out, or with an empty Key for a broken keyword/value pair (an unterminated quote) that is
// not one: naming the key could quote a password.
func Split(dsn string, ours func(key string) bool) (inner string, params []Param, err error) {
	inner, params, err = split(dsn, ours)
	if err == nil && len(params) > 0 && formOf(inner) == formKV && formOf(dsn) != formKV {
		if _, _, err := split(inner, ours); err != nil {
			return "", nil, &Error{Key: params[0].Key, Err: errStrandedForm}
		}
	}
	return inner, params, err
}

func split(dsn string, ours func(key string) bool) (string, []Param, error) {
	switch formOf(dsn) {
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

// splitQuery is split for the query form. The other parameters stay exactly as written,
// percent-encoding included, because each inner driver decodes its DSN its own way.
func splitQuery(dsn string, ours func(string) bool) (string, []Param, error) {
	q, frag := queryBounds(dsn)
	if q < 0 {
		return dsn, nil, nil
	}
	var params []Param
	var kept []string
	for part := range strings.SplitSeq(dsn[q+1:frag], "&") {
		rawKey, rawValue, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(rawKey)
		if err != nil {
			if ours(rawKey) {
				return "", nil, &Error{Key: rawKey, Err: fmt.Errorf("bad percent-encoding in key: %w", err)}
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
			return "", nil, &Error{Key: key, Err: fmt.Errorf("bad percent-encoding in value: %w", err)}
		}
		params = append(params, Param{key, value})
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
// means: Split refuses it in a pair it takes out, the redactor reads on.
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

// splitKV is split for the keyword/value form (kvTokens). A word without '=' is left for the
// inner driver to reject unless it is one of ours. Each pair taken out is cut with one adjacent
// whitespace byte.
func splitKV(dsn string, ours func(string) bool) (string, []Param, error) {
	var params []Param
	var cuts [][2]int
	n := len(dsn)
	for t := range kvTokens(dsn) {
		mine := ours(t.key)
		switch {
		case t.problem != nil && mine:
			return "", nil, &Error{Key: t.key, Err: t.problem}
		case t.problem == errUnterminated:
			// Naming the key could quote a password: in "password=se cret='x" the key would
			// be "cret".
			return "", nil, &Error{Err: errors.New("unterminated quoted value in keyword/value DSN")}
		case mine:
			params = append(params, Param{t.key, unescapeKV(t.raw)})
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
		// One separating byte goes with the pair, so Join's "gate_x=1 " + inner reads back
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

func isKVSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func skipSpace(s string, i int) int {
	for i < len(s) && isKVSpace(s[i]) {
		i++
	}
	return i
}
