package dsn

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Passwords never appear in what gated returns or prints, not even in part. The inner drivers
// quote DSNs in their parse errors (lib/pq repeats the whole URL; pgx redacts, but cuts a quoted
// password with a space apart and shows the rest), and gated's own Config prints as a DSN. So:
//
//   - secretsOf finds the passwords of a DSN as libpq reads it (keyword/value pairs with quoting
//     and backslash escapes, spaces around '='; a URL's userinfo and query; mysql's
//     user:password@), in every spelling a driver or fmt may print them;
//   - Redact removes from a message every piece of 4 bytes or more of those spellings, and
//     every shorter password whole;
//   - RedactDSN replaces the password values of a DSN itself, so that the rest stays readable.

// Redacted is what replaces a password, or a run of its pieces.
const Redacted = "xxxxx"

// minPiece is the shortest piece of a password that Redact removes wherever it appears.
// Shorter passwords are removed whole.
const minPiece = 4

// Redact returns msg, a message that may quote dsn or parts of it, with every password that dsn
// holds removed: each run of msg made of pieces of 4 or more bytes of a password, as written,
// decoded or escaped the ways drivers and fmt print it, and each shorter password whole, becomes
// Redacted. It over-approximates: text that happens to spell part of a password goes too. Its
// cost is linear in the lengths of msg and dsn.
func Redact(msg, dsn string) string {
	secrets := secretsOf(dsn)
	if len(secrets) == 0 {
		return msg
	}
	// A piece is 4 bytes, so it is kept as a uint32: no string per piece.
	pieces := make(map[uint32]struct{})
	for _, s := range secrets {
		if len(s) < minPiece {
			msg = strings.ReplaceAll(msg, s, Redacted)
			continue
		}
		for i := 0; i+minPiece <= len(s); i++ {
			pieces[pieceAt(s, i)] = struct{}{}
		}
	}
	if len(pieces) == 0 || len(msg) < minPiece {
		return msg
	}
	hit := make([]bool, len(msg))
	found := false
	for i := 0; i+minPiece <= len(msg); i++ {
		if _, ok := pieces[pieceAt(msg, i)]; ok {
			for j := i; j < i+minPiece; j++ {
				hit[j] = true
			}
			found = true
		}
	}
	if !found {
		return msg
	}
	// Widen the hits to whole characters: a piece may start or end inside one.
	for i := len(msg) - 2; i >= 0; i-- {
		if hit[i+1] && !utf8.RuneStart(msg[i+1]) {
			hit[i] = true
		}
	}
	for i := 1; i < len(msg); i++ {
		if hit[i-1] && !utf8.RuneStart(msg[i]) {
			hit[i] = true
		}
	}
	var b strings.Builder
	b.Grow(len(msg))
	for i := 0; i < len(msg); i++ {
		switch {
		case !hit[i]:
			b.WriteByte(msg[i])
		case i == 0 || !hit[i-1]:
			b.WriteString(Redacted)
		}
	}
	return b.String()
}

// pieceAt returns the minPiece bytes of s at i as one number.
func pieceAt(s string, i int) uint32 {
	return uint32(s[i])<<24 | uint32(s[i+1])<<16 | uint32(s[i+2])<<8 | uint32(s[i+3])
}

// secretsOf returns the passwords in dsn in every spelling that a message may hold: as written,
// decoded (libpq's and pgx's keyword/value unescaping, percent-decoding) and encoded again
// (keyword/value quoting, percent-encoding, Go's %q). It over-approximates rather than misses.
//
// A malformed URL's password may end at any '@' after "user:", and a driver may print any of
// these candidates. Every decoding and encoding here works byte by byte or rune by rune (a
// '%' without two hex digits after it stays as it is), so each spelling of a candidate that
// ends before an '@' is a prefix of the same spelling of the longest candidate, which thus
// holds every piece of them: only the longest, and the few candidates short enough to have a
// spelling shorter than a piece, are returned. The result is linear in the length of dsn.
func secretsOf(dsn string) []string {
	var raw []string
	if formOf(dsn) == formKV {
		for t := range kvTokens(dsn) {
			if isPasswordKey(t.key) && t.problem != errMissingValue {
				raw = append(raw, unescapeKV(t.raw), dsn[t.valueStart:t.end], strings.Trim(dsn[t.valueStart:t.end], "'"))
			}
		}
	} else if user, after, ok := strings.Cut(afterScheme(dsn), ":"); ok && !strings.ContainsAny(user, "/?#@= \t") {
		// user:password@host of a URL or a mysql DSN, where the password may hold '@', '/', '?'
		// and '#' unescaped: every '@' may be the end.
		if last := strings.LastIndexByte(after, '@'); last >= 0 {
			raw = append(raw, after[:last])
			// A decoding is at least a third as long as what it decodes ("%41" is "A"), so
			// only a candidate shorter than 3 pieces may have a spelling shorter than one.
			for at := strings.IndexByte(after, '@'); at >= 0 && at < last && at < 3*minPiece; {
				raw = append(raw, after[:at])
				next := strings.IndexByte(after[at+1:], '@')
				if next < 0 {
					break
				}
				at += 1 + next
			}
		}
	}
	if q := strings.IndexByte(dsn, '?'); q >= 0 {
		for part := range strings.SplitSeq(dsn[q+1:], "&") {
			k, v, ok := strings.Cut(part, "=")
			if dk, err := url.QueryUnescape(k); err == nil {
				k = dk
			}
			if ok && isPasswordKey(k) {
				if end := strings.IndexByte(v, '#'); end >= 0 {
					raw = append(raw, v[:end])
				}
				raw = append(raw, v)
			}
		}
	}

	seen := make(map[string]bool)
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, r := range raw {
		decoded := [...]string{r, unescapeKV(r), unescapeQuotes(r), unescapePercent(r, false), unescapePercent(r, true)}
		for i, d := range decoded {
			if slices.Contains(decoded[:i], d) {
				continue // most decodings leave r as it is
			}
			add(d)
			add(escapeKV(d))
			add(url.QueryEscape(d))
			add(url.PathEscape(d))
			add(strings.TrimPrefix(url.UserPassword("", d).String(), ":"))
			q := strconv.Quote(d)
			add(q[1 : len(q)-1])
		}
	}
	return out
}

// unescapePercent decodes s as url.PathUnescape does, or url.QueryUnescape with plus, except
// that a '%' without two hex digits after it stays as written instead of failing the whole
// string: the decoding of a part of s that ends before an '@' is then a prefix of the decoding
// of s (see secretsOf), and a driver may well print what it decoded before a bad escape.
func unescapePercent(s string, plus bool) string {
	if strings.IndexByte(s, '%') < 0 && (!plus || strings.IndexByte(s, '+') < 0) {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		case c == '+' && plus:
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// afterScheme returns dsn without its "scheme://", if any.
func afterScheme(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		return dsn[i+3:]
	}
	return dsn
}

// isPasswordKey reports whether a DSN key holds a secret: password, sslpassword and the like.
func isPasswordKey(key string) bool {
	return strings.Contains(strings.ToLower(key), "password")
}

// escapeKV escapes quotes and backslashes as a quoted keyword/value value holds them (lib/pq
// writes a URL's password so when it turns the URL into keyword/value form).
func escapeKV(s string) string { return kvEscaper.Replace(s) }

var kvEscaper = strings.NewReplacer(`\`, `\\`, `'`, `\'`)

// RedactDSN returns dsn with the value of every password key, and a URL's or mysql DSN's
// userinfo password, replaced by "xxxxx"; then anything else that spells a piece of a password
// goes as in Redact.
func RedactDSN(dsn string) string {
	type span struct{ start, end int }
	var spans []span
	switch formOf(dsn) {
	case formKV:
		for t := range kvTokens(dsn) {
			if isPasswordKey(t.key) && t.problem != errMissingValue {
				spans = append(spans, span{t.valueStart, t.end})
			}
		}
	case formQuery:
		start := 0
		if i := strings.Index(dsn, "://"); i >= 0 {
			start = i + 3
		}
		if at := userinfoEnd(dsn, start); at >= 0 {
			if colon := strings.IndexByte(dsn[start:at], ':'); colon >= 0 {
				spans = append(spans, span{start + colon + 1, at})
			}
		}
		if q, frag := queryBounds(dsn); q >= 0 {
			off := q + 1
			for part := range strings.SplitSeq(dsn[q+1:frag], "&") {
				k, _, ok := strings.Cut(part, "=")
				if dk, err := url.QueryUnescape(k); err == nil {
					k = dk
				}
				if ok && isPasswordKey(k) {
					spans = append(spans, span{off + len(k) + 1, off + len(part)})
				}
				off += len(part) + 1
			}
		}
	}
	var b strings.Builder
	prev := 0
	for _, s := range spans {
		if s.start < prev || s.end < s.start || s.end > len(dsn) {
			continue
		}
		b.WriteString(dsn[prev:s.start])
		b.WriteString(Redacted)
		prev = s.end
	}
	b.WriteString(dsn[prev:])
	return Redact(b.String(), dsn)
}

// userinfoEnd returns the index of the '@' that ends the userinfo of a DSN whose authority starts
// at start, or -1: the last '@' before the query (a password may hold an unescaped '@').
func userinfoEnd(dsn string, start int) int {
	q, _ := queryBounds(dsn)
	end := len(dsn)
	if q >= 0 {
		end = q
	}
	if start > end {
		return -1
	}
	at := strings.LastIndexByte(dsn[start:end], '@')
	if at < 0 {
		return -1
	}
	return start + at
}

// redactedError is an inner driver's error about a DSN, with the DSN's passwords removed from
// its message. It wraps the driver's error, so errors.As still finds the driver's type (whose own
// message may quote the password: print the redactedError, not what it wraps — except a
// *url.Error, which lib/pq returns for a URL it cannot parse and which quotes the whole URL:
// RedactError wraps a copy of it with the passwords removed).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// RedactError returns err with the passwords in dsn removed from its message.
func RedactError(err error, dsn string) error {
	if ue, ok := err.(*url.Error); ok {
		err = &url.Error{Op: ue.Op, URL: Redact(ue.URL, dsn), Err: ue.Err}
	}
	return &redactedError{msg: Redact(err.Error(), dsn), err: err}
}

// unescapeQuotes decodes only \\ and \', as pgx before 5.12 read a keyword/value value: a
// message of a driver that reads so may hold that spelling.
func unescapeQuotes(s string) string { return quoteUnescaper.Replace(s) }

var quoteUnescaper = strings.NewReplacer(`\\`, `\`, `\'`, `'`)
