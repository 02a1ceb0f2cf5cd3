package postgres

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen holds one connection of its own (outside the pool, which a
// transaction-mode pooler would share) in LISTEN on Channel and calls wake
// for every announcement, until ctx ends. A lost connection is retried with
// a growing pause; after each reconnection wake runs once, since
// announcements sent meanwhile were lost (the workers' polling covers the
// gap either way).
func listen(ctx context.Context, cfg *pgx.ConnConfig, log *slog.Logger, wake func()) {
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := listenOnce(ctx, cfg, wake, func() { pause = 100 * time.Millisecond })
		if ctx.Err() != nil {
			return
		}
		log.Warn("postgres: listening for new events failed; workers poll meanwhile", "err", err, "retry_in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 30*time.Second)
	}
}

func listenOnce(ctx context.Context, cfg *pgx.ConnConfig, wake, connected func()) error {
	c, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, `LISTEN `+Channel); err != nil {
		return err
	}
	connected()
	wake()
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}
