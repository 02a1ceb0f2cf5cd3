package natsbus

import (
	"os"
	"testing"
)

// envServerBin names the nats-server binary the end-to-end test runs
// against (Debian's package: /usr/sbin/nats-server, version 2.9).
const envServerBin = "COURIER_NATS_SERVER_BIN"

// TestRealServer runs the reliability scenarios against the nats-server
// binary from the distribution instead of the embedded server, so that every
// JetStream feature the bus uses is proven on the oldest server operators
// are likely to run. It runs only when COURIER_NATS_SERVER_BIN is set:
//
//	COURIER_NATS_SERVER_BIN=/usr/sbin/nats-server go test ./outbox/natsbus/ -run TestRealServer
func TestRealServer(t *testing.T) {
	bin := os.Getenv(envServerBin)
	if bin == "" {
		t.Skip(envServerBin + " not set")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", envServerBin, bin, err)
	}
	ext := externalBroker(bin)
	for name, scenario := range map[string]func(*testing.T, brokerFunc){
		"RelaySameEventTwiceLandsOnce":    testRelaySameEventTwiceLandsOnce,
		"BrokerOutageLosesNothing":        testBrokerOutageLosesNothing,
		"RelayRecreatesDeletedStream":     testRelayRecreatesDeletedStream,
		"RelayDeadLettersUnpublishable":   testRelayDeadLettersUnpublishable,
		"ReconcileUpdatesInPlace":         testReconcileUpdatesInPlace,
		"ReconcileRefusedLogsCommand":     testReconcileRefusedLogsCommand,
		"ReconcilePushConsumerNotReady":   testReconcilePushConsumerNotReady,
		"AlwaysFailingExhaustsMaxDeliver": testAlwaysFailingExhaustsMaxDeliver,
		"PermanentFailureTerminates":      testPermanentFailureTerminates,
		"ReplayExhausted":                 testReplayExhausted,
		"ProgressKeepsMessage":            testProgressKeepsMessage,
		"TwoWorkersNeverOverlap":          testTwoWorkersNeverOverlap,
		"CoreMode":                        testCoreMode,
		"KilledWorkerLosesNothing":        testKilledWorkerLosesNothing,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			scenario(t, ext)
		})
	}
}
