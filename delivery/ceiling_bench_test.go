package delivery_test

import (
	"bytes"
	"crypto/rsa"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-ap/courier/activitypub"
)

// BenchmarkFanoutCeiling measures, per transport, what a sender that stores
// nothing reaches on this machine, beside courier's own fan-out in the same
// run: the ceiling of BenchmarkFanout's CPU ratio. The sender posts the
// same deliveries (benchNotes activities to benchHosts shared inboxes, the
// same receivers' process) from benchConcurrency goroutines, each POST
// signed as the delivery path signs it (activitypub.SignRequest) and sent
// through the production client with delivery's timeouts and per-host
// connections, its answer read; no database, no queue, no records, no host
// health. It reports, each as a ratio in one run:
//
//   - <transport>_ceiling_ratio_to_signing_cpu: the sender's deliveries per
//     CPU-second over the RSA-2048 signatures per CPU-second its run's
//     probe measured (signProbe, as BenchmarkFanout's _same_time ratio);
//   - <transport>_ratio_to_signing_cpu: courier's fan-out (fanoutRun, all
//     hosts healthy) measured the same way right after it;
//   - <transport>_of_ceiling: the second over the first.
//
// What the ceiling leaves above a goal is all the durable path (the
// fan-out's rows, claims, ledger, settles, attempt records, host health)
// may spend. Run it once (about two minutes on two cores):
//
//	go test ./delivery/ -run '^$' -bench 'BenchmarkFanoutCeiling' -benchtime 1x -timeout 20m
func BenchmarkFanoutCeiling(b *testing.B) {
	ca := newBenchCA(b)
	for b.Loop() {
		for _, mode := range []string{"http1", "tls-http1", "tls-http2"} {
			ceiling := ceilingRun(b, ca, mode)
			courier := fanoutRun(b, ca, mode, 0, 0)
			top, got := ceiling.rate.cpu/ceiling.signCPU, courier.rate.cpu/courier.signCPU
			name := strings.ReplaceAll(mode, "-", "_")
			b.ReportMetric(top, name+"_ceiling_ratio_to_signing_cpu")
			b.ReportMetric(got, name+"_ratio_to_signing_cpu")
			b.ReportMetric(got/top, name+"_of_ceiling")
			b.Logf("%s: a sender that stores nothing %.0f deliveries per CPU-second (ratio %.3f to the %.0f signatures per CPU-second during its run), %.3f new connections/delivery; courier %.0f (ratio %.3f to %.0f), %.3f new connections/delivery: %.2f of the ceiling",
				mode, ceiling.rate.cpu, top, ceiling.signCPU, ceiling.connsPerDelivery(),
				courier.rate.cpu, got, courier.signCPU, courier.connsPerDelivery(), got/top)
		}
	}
}

// ceilingRun sends benchNotes activities to every host of a receivers'
// process of the given transport, storing nothing, and returns its rates.
func ceilingRun(b *testing.B, ca *benchCA, mode string) runResult {
	b.Helper()
	key, err := activitypub.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	pub, err := activitypub.EncodePublicKeyPEM(&key.PublicKey)
	if err != nil {
		b.Fatal(err)
	}
	actor := baseURL + "/users/ceiling"
	keyID := activitypub.KeyID(actor)
	spec := ca.spec(map[string]string{keyID: pub})
	spec.Hosts, spec.Mode = benchHosts, mode
	rc := startReceivers(b, spec)
	defer rc.stop()
	// The client the fan-out's instance gives delivery.New.
	client := ca.deliveryClient()
	defer client.CloseIdleConnections()
	bodies := make([][]byte, benchNotes)
	for n := range bodies {
		bodies[n] = ceilingActivity(actor, n)
	}
	want := int64(benchHosts * benchNotes)
	var failed atomic.Int64
	var firstErr atomic.Value
	r, signCPU := measureProbed(b, func() int64 {
		type job struct{ note, host int }
		jobs := make(chan job)
		var wg sync.WaitGroup
		for range benchConcurrency {
			wg.Go(func() {
				for j := range jobs {
					if err := ceilingPost(client, rc.hosts[j.host]+"/inbox", bodies[j.note], keyID, key); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}
			})
		}
		for n := range benchNotes {
			for h := range rc.hosts {
				jobs <- job{n, h}
			}
		}
		close(jobs)
		wg.Wait()
		return want
	})
	st := rc.stats(b)
	if failed.Load() != 0 || st.Healthy != want || st.Rejected != 0 || st.Duplicates != 0 {
		b.Fatalf("%s ceiling: %d POSTs failed (first: %v); receivers counted %d of %d, %d rejected, %d duplicates",
			mode, failed.Load(), firstErr.Load(), st.Healthy, want, st.Rejected, st.Duplicates)
	}
	return runResult{rate: r, stats: st, signCPU: signCPU}
}

// ceilingPost signs one delivery as the delivery path does and sends it,
// reading the answer; anything but a 2xx is an error.
func ceilingPost(client *http.Client, inbox string, body []byte, keyID string, key *rsa.PrivateKey) error {
	req, err := http.NewRequest(http.MethodPost, inbox, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", activitypub.ContentType)
	if err := activitypub.SignRequest(req, body, keyID, key, time.Now()); err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", inbox, resp.Status)
	}
	return nil
}

// ceilingActivity is the n-th public Create of a note by actor, of the size
// and shape of the activities courier's fan-out delivers.
func ceilingActivity(actor string, n int) []byte {
	id := fmt.Sprintf("%s/activities/ceiling-%d", baseURL, n)
	obj := fmt.Sprintf("%s/objects/ceiling-%d", baseURL, n)
	published := time.Date(2026, 12, 1, 12, 0, n, 0, time.UTC).Format(time.RFC3339)
	return fmt.Appendf(nil, `{"@context":["https://www.w3.org/ns/activitystreams","https://w3id.org/security/v1"],`+
		`"id":%q,"type":"Create","actor":%q,"published":%q,"to":["https://www.w3.org/ns/activitystreams#Public"],"cc":[%q],`+
		`"object":{"id":%q,"type":"Note","attributedTo":%q,"content":"<p>note %d</p>","published":%q,`+
		`"to":["https://www.w3.org/ns/activitystreams#Public"],"cc":[%q],"url":%q}}`,
		id, actor, published, actor+"/followers", obj, actor, n, published, actor+"/followers", obj)
}
