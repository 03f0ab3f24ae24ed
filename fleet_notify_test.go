package gated

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gatedsql/gated/internal/fleet"
)

// TestLeaseConnectionWaitsForANotification, with pgx and lib/pq: a lease connection that listens
// to the fleet's channel returns from WaitNotify when another connection notifies on it, ignores
// a notification with its own payload, returns the context's error when the context ends first,
// and stays usable after each.
func TestLeaseConnectionWaitsForANotification(t *testing.T) {
	for _, drv := range innerDrivers {
		t.Run(drv, func(t *testing.T) {
			ft := newFleetTest(t, totals12, 3*time.Second, 100*time.Millisecond)
			dial, _ := ft.dialerWith(drv, "")
			ctx := context.Background()
			listener, err := dial(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(listener.Close)
			sender, err := dial(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sender.Close)
			w := listener.Waiter()
			if w == nil {
				t.Fatalf("a %s lease connection cannot wait for notifications", drv)
			}
			channel := fleet.NotifyChannel(ft.table, ft.name)
			if err := fleet.Listen(ctx, listener, channel); err != nil {
				t.Fatal(err)
			}
			usable := func(what string) {
				t.Helper()
				rows, err := listener.Query(ctx, "SELECT 1")
				if err != nil || len(rows) != 1 {
					t.Fatalf("%s: the lease connection is not usable: %v", what, err)
				}
			}

			// An ended context: its error, and the connection usable.
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err = w.WaitNotify(short, "7")
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitNotify with an ended context: %v, want context.DeadlineExceeded", err)
			}
			usable("after a wait that ended with its context")

			// Its own payload, then another's: only the other's ends the wait. Many times, since the
			// other's may come in the same read as the answer to the statement that delivered its
			// own (lib/pq then holds it in its buffer, where the socket does not show it).
			for round := range 20 {
				waited := make(chan error, 1)
				wctx, wcancel := context.WithCancel(ctx)
				go func() { waited <- w.WaitNotify(wctx, "7") }()
				if err := fleet.Notify(ctx, sender, channel, 7); err != nil {
					t.Fatal(err)
				}
				if err := fleet.Notify(ctx, sender, channel, 8); err != nil {
					t.Fatal(err)
				}
				var got error
				waitFor(t, fmt.Sprintf("the wait to end on the other member's notification (round %d)", round+1), func() bool {
					select {
					case got = <-waited:
						return true
					default:
						return false
					}
				})
				wcancel()
				if got != nil {
					t.Fatalf("round %d: WaitNotify: %v, want nil for a notification", round+1, got)
				}
				usable("after a notification")
			}

			// Only its own payload: the wait goes on until its context ends.
			if err := fleet.Notify(ctx, sender, channel, 7); err != nil {
				t.Fatal(err)
			}
			short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
			err = w.WaitNotify(short, "7")
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("WaitNotify after its own notification only: %v, want context.DeadlineExceeded", err)
			}
			usable("after its own notification")
		})
	}
}

// TestFleetNewcomerIsSeatedOnNotification, with pgx and lib/pq: with a refresh interval of an
// hour, a newcomer is seated and a leaver's share taken over only because the members notify
// each other: the newcomer after it joins, the member that shrank after it declares less, the
// one that leaves after it has left.
func TestFleetNewcomerIsSeatedOnNotification(t *testing.T) {
	for _, drv := range innerDrivers {
		t.Run(drv, func(t *testing.T) {
			ft := newFleetTest(t, totals12, 3*time.Hour, time.Hour)
			defer ft.watchDeclared()()
			dial, _ := ft.dialerWith(drv, "")
			_, ta := ft.member(dial, nil)
			ft.waitShares("alone", []*fakeTarget{ta}, 12)
			b, tb := ft.member(dial, nil)
			ft.waitShares("a newcomer beside the first", []*fakeTarget{ta, tb}, 6, 6)
			_, tc := ft.member(dial, nil)
			ft.waitShares("a third", []*fakeTarget{ta, tb, tc}, 4, 4, 4)
			b.Close()
			tb.gone()
			ft.waitShares("after the second left", []*fakeTarget{ta, tc}, 6, 6)
		})
	}
}
