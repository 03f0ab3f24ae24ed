package drivers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"

	"github.com/gatedsql/gated/internal/sockconn"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgxConnectOptions returns the options of gated's pgx connector. Its BeforeConnect runs for
// every physical connection: first Config.PgxBeforeConnect on a copy of the parsed
// configuration, then what gated owns is put back (pgx's default handling of an ended context,
// gated's startup parameters, the application_name of gate_name, the exec mode a transaction
// pooler needs), and last the dialer, the hook's or pgx's, is wrapped so that the socket is a
// sockconn.Conn. Running after the hook, nothing the hook does can take the socket from gated. Its
// AfterConnect runs Config.PgxAfterConnect.
func pgxConnectOptions(o Options) []stdlib.OptionOpenDB {
	before := func(ctx context.Context, cfg *pgx.ConnConfig) error {
		if o.PgxBefore != nil {
			if err := pgxRunBefore(ctx, cfg, o); err != nil {
				return err
			}
		}
		dial := cfg.DialFunc
		cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return sockconn.WrapDialed(ctx, c, 0, false), nil
		}
		return nil
	}
	opts := []stdlib.OptionOpenDB{stdlib.OptionBeforeConnect(before)}
	if o.PgxAfter != nil {
		opts = append(opts, stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
			if err := o.PgxAfter(ctx, conn); err != nil {
				// stdlib returns AfterConnect's error without closing the connection.
				conn.Close(ctx)
				return fmt.Errorf("gated: Config.PgxAfterConnect: %w", err)
			}
			return nil
		}))
	}
	return opts
}

// pgxRunBefore runs Config.PgxBeforeConnect on cfg and puts back what gated owns.
func pgxRunBefore(ctx context.Context, cfg *pgx.ConnConfig, o Options) error {
	// stdlib hands each attempt a shallow copy, whose RuntimeParams, Fallbacks and TLSConfig
	// every other attempt shares, perhaps at this moment: the hook gets a deep one.
	*cfg = *cfg.Copy()
	watcher := cfg.BuildContextWatcherHandler
	if err := o.PgxBefore(ctx, cfg); err != nil {
		return fmt.Errorf("gated: Config.PgxBeforeConnect: %w", err)
	}
	if cfg.DialFunc == nil {
		return errors.New("gated: Config.PgxBeforeConnect left pgx.ConnConfig.DialFunc nil")
	}
	// gated releases a permit when pgx's asynchronous close of a cancelled connection has ended
	// (see newPgx): another handler would break that.
	cfg.BuildContextWatcherHandler = watcher
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if o.App != "" && cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = o.App
	}
	maps.Copy(cfg.RuntimeParams, o.Params)
	if o.Pooled && cfg.DefaultQueryExecMode != pgx.QueryExecModeExec && cfg.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol {
		return fmt.Errorf("gated: Config.PgxBeforeConnect set DefaultQueryExecMode %v, which prepares named statements that a transaction pooler (gate_pooler=transaction) gives to other clients: keep exec or simple_protocol", cfg.DefaultQueryExecMode)
	}
	return nil
}
