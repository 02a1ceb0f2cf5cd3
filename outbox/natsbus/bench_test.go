package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courier-ap/courier/outbox"
	"github.com/courier-ap/courier/sqldb"
	"github.com/courier-ap/courier/sqldb/storetest"
)

// benchEvents is how many events one benchmark iteration relays.
const benchEvents = 20000

// BenchmarkRelay measures events per second from outbox rows to
// acknowledged JetStream messages (file storage, SQLite with the production
// synchronous=FULL), beside a plain asynchronous publish loop of the same
// messages (same size, headers and Nats-Msg-Id, same bound on pending acks)
// to another stream of the same server in the same run, and reports the
// ratio. The plain loop's stream is set up as the relay's is (the same
// config, a durable consumer of the same config, an advisory stream), so
// the server does the same work for a message of either. Both start with
// their stream set up and their connection open: the
// relay's timer starts when it is told that 20,000 committed rows are
// pending and stops when it has marked the last of them done (claimed,
// read, published, acknowledged, settled); the plain loop's runs from its
// first publish to its last ack. It also measures the relay's own ceiling in the same run: the
// relay's writes (each completing a batch and claiming the next) for the
// same number of rows with no broker, which is what the relay cannot go
// faster than (one SQLite writer). On a shared machine both rates follow
// the CPU the process gets, so it also reports the CPU time the process
// spends per event in each (relay, broker and client together). Run it with
// a small count, for example:
//
//	go test ./outbox/natsbus/ -run '^$' -bench BenchmarkRelay -benchtime 2x
func BenchmarkRelay(b *testing.B) {
	br := newBroker(b)
	_, js := br.js(b)
	payload := json.RawMessage(`{"activity":"` + strings.Repeat("x", 480) + `"}`)
	var relayDur, pubDur, sqlDur time.Duration
	var relayCPU, pubCPU time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := benchDB(b)
		cfg := fastConfig(br.url(), db, nil, nil)
		cfg.Stream = fmt.Sprintf("BENCH_RELAY_%d", i)
		cfg.SubjectPrefix = fmt.Sprintf("bench.relay%d", i)
		cfg.AdvisoryStream = fmt.Sprintf("BENCH_ADV_%d", i)
		cfg.PublishTimeout = 30 * time.Second
		// The relay starts relaying when the timer starts (Notify), not at
		// its next poll.
		cfg.PollInterval, cfg.PauseMax = time.Minute, time.Minute
		reg := prometheus.NewRegistry()
		cfg.Registerer = reg
		bus := mustNew(b, cfg)
		// Connected, its stream set up, idle: as the plain loop's stream
		// is set up before its timer starts.
		stop := runBus(b, bus, (*Bus).RunRelay)
		waitReady(b, bus)
		evs := make([]outbox.Event, benchEvents)
		for j := range evs {
			evs[j] = outbox.Event{Type: "delivery.post", Target: "remote.example", Payload: payload}
		}
		enqueue(b, db, evs...)

		b.StartTimer()
		start, cpu := time.Now(), processCPU(b)
		bus.Notify()
		// Drained when the relay has counted every row published and
		// marked done (it counts after the commit); reading the counter
		// costs next to nothing, so the wait can look often.
		waitRelayed(b, bus, benchEvents)
		relayDur += time.Since(start)
		relayCPU += processCPU(b) - cpu
		b.StopTimer()
		if n := count(b, db.Read, `SELECT COUNT(*) FROM event_queue WHERE status = 'done'`); n != benchEvents {
			b.Fatalf("%d rows done, want %d", n, benchEvents)
		}
		stop()

		// The plain loop: the same messages, published asynchronously with
		// the same in-flight bound, to a stream of the same kind: set up as
		// the relay's is (its config, its durable consumer, which the
		// server tells of each message, and the advisory stream beside).
		stream := fmt.Sprintf("BENCH_PLAIN_%d", i)
		prefix := fmt.Sprintf("bench.plain%d", i)
		ctx := context.Background()
		pcfg := cfg
		pcfg.Stream, pcfg.SubjectPrefix, pcfg.AdvisoryStream = stream, prefix, fmt.Sprintf("BENCH_PADV_%d", i)
		pcfg.Registerer = nil
		if err := mustNew(b, pcfg).reconcile(ctx, js); err != nil {
			b.Fatal(err)
		}
		pnc, _ := br.js(b)
		pjs, err := jetstream.New(pnc, jetstream.WithPublishAsyncMaxPending(DefaultMaxInFlight))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start, cpu = time.Now(), processCPU(b)
		for _, ev := range evs {
			m := encode(prefix, ev)
			if _, err := pjs.PublishMsgAsync(m, jetstream.WithMsgID(ev.ID), jetstream.WithExpectStream(stream),
				jetstream.WithStallWait(30*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-pjs.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			b.Fatal("plain publishes not acknowledged in 5 minutes")
		}
		pubDur += time.Since(start)
		pubCPU += processCPU(b) - cpu
		b.StopTimer()
		if n := streamMsgs(b, js, stream); n != benchEvents {
			b.Fatalf("plain stream holds %d messages, want %d", n, benchEvents)
		}
		if n := streamMsgs(b, js, cfg.Stream); n != benchEvents {
			b.Fatalf("relay stream holds %d messages, want %d", n, benchEvents)
		}

		// The relay's own ceiling: the same claims and completions on a
		// fresh database, with no broker at all.
		cdb := benchDB(b)
		for j := 0; j < len(evs); j += 1000 {
			batch := make([]outbox.Event, 1000)
			for k := range batch {
				batch[k] = outbox.Event{Type: evs[j+k].Type, Target: evs[j+k].Target, Payload: payload}
			}
			enqueue(b, cdb, batch...)
		}
		q := outbox.NewQueue(cdb.Write, outbox.QueueOptions{Read: cdb.Read})
		b.StartTimer()
		start = time.Now()
		// The relay's writes: each completes the previous batch and claims
		// the next by id (the relay reads the rows on another goroutine).
		var prev []outbox.Settlement
		for done := 0; done < benchEvents; {
			c, _, err := q.SettleAndClaimIDs(ctx, DefaultBatchSize, DefaultLease, prev...)
			if err != nil || len(c.IDs) == 0 {
				b.Fatalf("claim: %d rows, %v", len(c.IDs), err)
			}
			prev = prev[:0]
			for _, id := range c.IDs {
				prev = append(prev, outbox.Settlement{Row: outbox.Row{ID: id, ClaimedAt: c.Token},
					Result: outbox.Result{Outcome: outbox.Succeeded}})
			}
			done += len(c.IDs)
		}
		if _, err := q.Settle(ctx, prev...); err != nil {
			b.Fatal(err)
		}
		sqlDur += time.Since(start)
		b.StopTimer()
	}
	total := float64(b.N * benchEvents)
	relayRate, pubRate, sqlRate := total/relayDur.Seconds(), total/pubDur.Seconds(), total/sqlDur.Seconds()
	b.ReportMetric(relayRate, "relay_events/s")
	b.ReportMetric(pubRate, "plain_msgs/s")
	b.ReportMetric(relayRate/pubRate, "ratio")
	b.ReportMetric(sqlRate, "claim+complete_rows/s")
	b.ReportMetric(relayRate/sqlRate, "relay/sql_ratio")
	b.ReportMetric(float64(relayCPU.Microseconds())/total, "relay_cpu_us/event")
	b.ReportMetric(float64(pubCPU.Microseconds())/total, "plain_cpu_us/msg")
	b.ReportMetric(0, "ns/op")
}

// waitRelayed waits until the relay has counted n rows published (and
// marked done), looking every 200 µs.
func waitRelayed(b *testing.B, bus *Bus, n int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for testutil.ToFloat64(bus.metrics.relayed) < float64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("relay published %v of %d rows in 5 minutes", testutil.ToFloat64(bus.metrics.relayed), n)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// processCPU is the CPU time the process (test, relay and embedded broker)
// has used so far: a loaded machine lowers both rates, not what each costs.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchDB is a fresh database with the production settings.
func benchDB(b *testing.B) *sqldb.DB {
	b.Helper()
	return storetest.Open(b, storetest.Location(b), storetest.Options{})
}
