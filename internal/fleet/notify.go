package fleet

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
)

// The fleet's notifications. A member that joins, declares less than before or leaves sends a
// notification (pg_notify, a statement of its own after the refresh's, so that the change is
// committed when it arrives) on the fleet's channel; members listen on their lease connections and
// refresh as soon as one arrives, so that the room a member makes is taken at once instead of at
// the others' next regular refresh. A notification carries nothing but the sender's member id, to
// tell one's own from the others': what changed is read by the refresh, as ever. A notification
// that is lost (a lease connection being replaced, a driver that cannot wait) costs only the wait
// until the next regular refresh.

// NotifyChannel returns the channel of the fleet named fleet in table: a fixed-length name (an
// identifier, within PostgreSQL's 63 bytes) that tells fleets and tables apart.
func NotifyChannel(table, fleet string) string {
	h := fnv.New64a()
	io.WriteString(h, table)
	io.WriteString(h, "\x00")
	io.WriteString(h, fleet)
	return fmt.Sprintf("gated_fleet_%016x", h.Sum64())
}

// Listen makes c receive the fleet's notifications.
func Listen(ctx context.Context, c Conn, channel string) error {
	return c.Exec(ctx, "LISTEN "+channel)
}

// Notify tells the fleet's listening members that member changed what it declares.
func Notify(ctx context.Context, c Conn, channel string, member int32) error {
	_, err := c.Query(ctx, "SELECT pg_notify($1, $2)", channel, strconv.Itoa(int(member)))
	return err
}
