package inbox

import (
	"encoding/json"
	"testing"
)

// TestReceivedPayload checks that the payload written without reflection
// is byte for byte the one json.Marshal writes, escapes included.
func TestReceivedPayload(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"https://remote.example/activities/1",
		"https://remote.example/a?b=c&d=<e>",
		`https://remote.example/"quoted"\back`,
		"https://remote.example/\u00e9t\u00e9/\u2028",
		"https://remote.example/\x7f\x01\t",
		"https://remote.example/\xff",
		"",
	} {
		got, err := receivedPayload(id)
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		want, err := json.Marshal(Received{ActivityID: id})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%q: payload %s, json.Marshal %s", id, got, want)
		}
	}
}

func FuzzReceivedPayload(f *testing.F) {
	f.Add("https://remote.example/activities/1")
	f.Add("<&>\"\\\x00\u2029")
	f.Fuzz(func(t *testing.T, id string) {
		got, err := receivedPayload(id)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(Received{ActivityID: id})
		if string(got) != string(want) {
			t.Fatalf("%q: payload %s, json.Marshal %s", id, got, want)
		}
	})
}
