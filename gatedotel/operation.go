package gatedotel

import (
	"context"
	"database/sql/driver"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/gatedsql/gated"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// The duration of each call into the inner driver, gated.EventStatement, is exported under the
// stable semantic conventions' name db.client.operation.duration, under gated's own earlier name
// gated.statement.duration, or both, as OTEL_SEMCONV_STABILITY_OPT_IN says (the package
// documentation has the table).

// StabilityOptInEnv is the environment variable that chooses the names of the operation
// duration histogram, read by NewObserver: a comma-separated list in which "database" asks for
// the stable semantic conventions only and "database/dup" for both the stable and the earlier
// names. Unset, or without either, the earlier name only.
const StabilityOptInEnv = "OTEL_SEMCONV_STABILITY_OPT_IN"

// operationBuckets are the explicit bucket boundaries, in seconds, the semantic conventions give
// db.client.operation.duration.
var operationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// stability says which names of the operation duration to record.
type stability struct{ earlier, stable bool }

// stabilityOptIn reads StabilityOptInEnv as otelsql does: "database/dup" first, then "database".
func stabilityOptIn() stability {
	dup, stable := false, false
	for item := range strings.SplitSeq(os.Getenv(StabilityOptInEnv), ",") {
		switch strings.TrimSpace(item) {
		case "database/dup":
			dup = true
		case "database":
			stable = true
		}
	}
	switch {
	case dup:
		return stability{earlier: true, stable: true}
	case stable:
		return stability{stable: true}
	}
	return stability{earlier: true}
}

// operationAttrs are one workload's attributes of db.client.operation.duration: the pool's name,
// the workload, and the server's (db.system.name, server.address, server.port) once Register
// has read them from the Connector's configuration.
type operationAttrs struct {
	kvs []attribute.KeyValue
	ok  []metric.RecordOption // kvs, for an operation that succeeded
}

// newOperationAttrs returns the function that makes a workload's operationAttrs from the
// attributes common to all of them.
func newOperationAttrs(common []attribute.KeyValue) func(string) *operationAttrs {
	return func(workload string) *operationAttrs {
		kvs := append(append([]attribute.KeyValue(nil), common...), WorkloadKey.String(workload))
		return &operationAttrs{kvs: kvs, ok: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}}
	}
}

// recordOperation records e, an EventStatement, in db.client.operation.duration. A failed
// operation adds error.type (and db.response.status_code when the error carries a SQLSTATE),
// which costs its attribute set; a successful one allocates nothing.
func (o *Observer) recordOperation(ctx context.Context, e gated.Event) {
	w := o.operations.Load().Get(e.Workload)
	if e.Err == nil {
		o.operationTime.Record(ctx, e.Duration.Seconds(), w.ok...)
		return
	}
	kvs := append(w.kvs[:len(w.kvs):len(w.kvs)], errorAttrs(e.Err)...)
	o.operationTime.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(kvs...))
}

// errorAttrs are error.type for err, the failure of an operation: its SQLSTATE when the driver
// reports one (pgx and lib/pq do), which is also db.response.status_code; the context's error
// for an operation its context ended; otherwise the error's Go type (semconv.ErrorType).
func errorAttrs(err error) []attribute.KeyValue {
	var state interface{ SQLState() string }
	if errors.As(err, &state) {
		if s := state.SQLState(); s != "" {
			return []attribute.KeyValue{semconv.ErrorTypeKey.String(s), semconv.DBResponseStatusCode(s)}
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return []attribute.KeyValue{semconv.ErrorTypeKey.String("context.DeadlineExceeded")}
	case errors.Is(err, context.Canceled):
		return []attribute.KeyValue{semconv.ErrorTypeKey.String("context.Canceled")}
	case errors.Is(err, driver.ErrBadConn):
		return []attribute.KeyValue{semconv.ErrorTypeKey.String("driver.ErrBadConn")}
	}
	return []attribute.KeyValue{semconv.ErrorType(err)}
}

// serverAttrs are db.system.name, from the Connector's inner driver, and server.address and
// server.port, from its DSN's first host; nothing else of the DSN (no user, no password, no
// database) is read. A host or port the DSN does not give is left out, and a DSN of an unknown
// form gives neither.
func serverAttrs(cfg *gated.Config) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	var host, port string
	switch cfg.Driver {
	case "pgx", "pgx/v5", "postgres", "postgresql":
		kvs = append(kvs, semconv.DBSystemNamePostgreSQL)
		if strings.Contains(cfg.DSN, "://") {
			host, port = urlHost(cfg.DSN)
		} else {
			host, port = keywordHost(cfg.DSN)
		}
		if host != "" && port == "" {
			port = "5432"
		}
	case "mysql":
		kvs = append(kvs, semconv.DBSystemNameMySQL)
		host, port = mysqlHost(cfg.DSN)
	default:
		kvs = append(kvs, semconv.DBSystemNameKey.String("other_sql"))
		if strings.Contains(cfg.DSN, "://") {
			host, port = urlHost(cfg.DSN)
		} else {
			host, port = keywordHost(cfg.DSN)
		}
	}
	if host == "" {
		return kvs
	}
	kvs = append(kvs, semconv.ServerAddress(host))
	if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
		kvs = append(kvs, semconv.ServerPort(n))
	}
	return kvs
}

// urlHost returns the first host and its port of a URL DSN
// (scheme://[userinfo@]host[:port][,host[:port]...][/path][?query]) as net/url reads it, which
// is what pgx and lib/pq connect to; the userinfo is not read.
func urlHost(dsn string) (host, port string) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", ""
	}
	h := u.Host
	if i := strings.IndexByte(h, ','); i >= 0 {
		h = h[:i]
	}
	return splitHostPort(h)
}

// keywordHost returns the first host and port of a keyword/value DSN (host=... port=...), read
// as libpq does (values may be single-quoted, with backslash escapes), so that no part of
// another keyword's value, a password's say, can be taken for one of them.
func keywordHost(dsn string) (host, port string) {
	s := dsn
	for {
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		if s == "" {
			return host, port
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "", ""
		}
		key := strings.TrimSpace(s[:eq])
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\f\v")
		var v strings.Builder
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		closed := !quoted
		for len(s) > 0 {
			c := s[0]
			if c == '\\' && len(s) > 1 {
				v.WriteByte(s[1])
				s = s[2:]
				continue
			}
			if quoted && c == '\'' {
				s, closed = s[1:], true
				break
			}
			if !quoted && strings.IndexByte(" \t\n\r\f\v", c) >= 0 {
				break
			}
			v.WriteByte(c)
			s = s[1:]
		}
		if !closed {
			return "", "" // an unterminated quote: nothing is trusted
		}
		val := v.String()
		if i := strings.IndexByte(val, ','); i >= 0 {
			val = val[:i]
		}
		switch key {
		case "host":
			host = val
		case "port":
			port = val
		}
	}
}

// mysqlHost returns the address of a go-sql-driver/mysql DSN
// ([user[:password]@][net[(addr)]]/dbname[?params]), the user and password skipped unread: the
// host and port of a TCP address (default 127.0.0.1:3306), or a Unix socket's path.
func mysqlHost(dsn string) (host, port string) {
	i := strings.LastIndexByte(dsn, '/')
	if i < 0 {
		return "", ""
	}
	rest := dsn[:i]
	if j := strings.LastIndexByte(rest, '@'); j >= 0 {
		rest = rest[j+1:]
	}
	network, addr := rest, ""
	if j := strings.IndexByte(rest, '('); j >= 0 && strings.HasSuffix(rest, ")") {
		network, addr = rest[:j], rest[j+1:len(rest)-1]
	}
	switch network {
	case "unix":
		return addr, ""
	case "", "tcp", "tcp4", "tcp6":
		if addr == "" {
			return "127.0.0.1", "3306"
		}
		host, port = splitHostPort(addr)
		if port == "" {
			port = "3306"
		}
		return host, port
	}
	return "", ""
}

// splitHostPort splits host[:port] or [ipv6][:port].
func splitHostPort(s string) (host, port string) {
	if strings.HasPrefix(s, "[") {
		if i := strings.IndexByte(s, ']'); i >= 0 {
			host, s = s[1:i], s[i+1:]
			port, _ = strings.CutPrefix(s, ":")
			return host, port
		}
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 && !strings.Contains(s[:i], ":") {
		return s[:i], s[i+1:]
	}
	return s, ""
}
