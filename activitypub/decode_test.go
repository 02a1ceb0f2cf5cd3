package activitypub

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// decodeCases are documents on the edges of what encoding/json accepts and
// of how it matches property names and unquotes strings.
var decodeCases = []string{
	`{"id":"https://a/1","type":"Create","actor":"https://a/u"}`,
	`  {"id":"https://a/1","type":"Create","actor":"https://a/u"}` + "\n\u00a0",
	"\v{\"id\":\"https://a/1\",\"type\":\"Create\",\"actor\":\"https://a/u\"}\f",
	`{"ID":"https://a/1","TYPE":"Create","Actor":"https://a/u"}`,
	// Kelvin sign and long s fold to k and s.
	`{"id":"https://a/1","type":"Like","actor":"https://a/u","ta\u212Aget":"x","ſummary":"s","ſenſitive":true}`,
	"{\"id\":\"https://a/1\",\"type\":\"Like\",\"actor\":\"https://a/u\",\"\\u0074arget\":\"https://t\",\"\\u017Fummary\":\"s\"}",
	`{"id":"https://a/1","id":"https://a/2","type":"Create","actor":"https://a/u","Actor":"https://a/v"}`,
	`{"id":"https://a/\u00e9\ud83d\ude00\ud800x\udc00\"\\\/\b\f\n\r\t","type":"Create","actor":"https://a/u"}`,
	"{\"id\":\"https://a/\xff\xfe\xed\xa0\x80\",\"type\":\"Create\",\"actor\":\"https://a/u\xc3\"}",
	"{\"id\":\"https://a/1\",\"type\":\"Create\",\"actor\":\"https://a/u\",\"k\xff\":1}",
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","content":{"fr":"b","":"e","de":"d"}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","content":{"":"e"}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","content":{"fr":"b","fr":"c","en":null}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","content":{"fr":"b","de":1}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","summary":{"\u0065n":"x","und":"u"}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","object":{"href":"https://a/h","type":"Link"}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","object":["https://a/o",{"id":"x"}]}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","object":null}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","object":42}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","object":{"id":["",null,"https://a/n"],"type":"Note",` +
		`"tag":[{"type":"Mention","href":"https://m","url":"https://u"},{"type":"Hashtag","url":{"href":"https://h"}},` +
		`{"id":"https://e","name":{"en":"x"}},"s",null,[{"type":"T"}]],"sensitive":"true","published":"2024-05-06T07:08:09Z"}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","object":{"type":"Note","tag":{"type":"Emoji","id":"https://e"},"sensitive":true}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","published":"2024-05-06T07:08:09.5","updated":"2024-05-06T07:08:09+0200"}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","to":[],"cc":[[]],"bto":{},"bcc":"","audience":[{"href":"h"},{"id":{"id":"x"}}]}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":[-0,0.5e10,-1E-2,1e+2,123]}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":01}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":1.}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":-}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":.5}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":1e}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":tru}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","n":nul}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","s":"\x"}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","s":"\u12G4"}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","s":"\'"}`,
	"{\"id\":\"https://a/1\",\"type\":\"Create\",\"actor\":\"https://a/u\",\"s\":\"\t\"}",
	`{"id":"https://a/1","type":"Create","actor":"https://a/u",}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u"}x`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u"} {}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","a":[1,]}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","a":[1 2]}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","a":{"b"}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u","a":{1:2}}`,
	`{"id":"https://a/1","type":"Create","actor":"https://a/u"`,
	`{"type":"Create","actor":"https://a/u"}`,
	`{"id":"https://a/1","type":[1,"","Create"],"actor":[{"type":"Person"},{"href":"https://a/u"}]}`,
	`{}`, `{`, `}`, `[]`, `""`, `null`, ``, ` `, `{"a":}`,
	deep(maxDepth - 1), deep(maxDepth), deep(maxDepth + 1),
}

// deep returns an activity whose "x" holds arrays nested so that the
// document's nesting depth is n.
func deep(n int) string {
	return `{"id":"https://a/1","type":"Create","actor":"https://a/u","x":` +
		strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}`
}

// sameResult fails t unless the two decodings agree: the same value, or
// errors with the same message.
func sameResult[T any](t *testing.T, what string, data []byte, got, want *T, gotErr, wantErr error) {
	t.Helper()
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("%s(%q): error %v, reference %v", what, data, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s(%q):\n got %+v\nwant %+v", what, data, got, want)
	}
}

func checkAgainstReference(t *testing.T, data []byte) {
	t.Helper()
	a, err := ParseActivity(data)
	ra, rerr := refParseActivity(data)
	sameResult(t, "ParseActivity", data, a, ra, err, rerr)
	if a != nil && a.Object != nil {
		// The object's id is read from the same properties as the object.
		if got, want := a.ObjectID, firstID(a.ObjectRaw); got != want {
			t.Fatalf("ParseActivity(%q): object id %q, firstID %q", data, got, want)
		}
	}
	o, err := ParseObject(data)
	ro, rerr := refParseObject(data)
	sameResult(t, "ParseObject", data, o, ro, err, rerr)
}

func TestDecodeMatchesReference(t *testing.T) {
	t.Parallel()
	for _, doc := range decodeCases {
		checkAgainstReference(t, []byte(doc))
	}
	err := filepath.WalkDir("testdata", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".json" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checkAgainstReference(t, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDecodeDepthLimit(t *testing.T) {
	t.Parallel()
	if _, err := ParseActivity([]byte(deep(maxDepth))); err != nil {
		t.Errorf("depth %d: %v", maxDepth, err)
	}
	if _, err := ParseActivity([]byte(deep(maxDepth + 1))); err == nil || !strings.Contains(err.Error(), "exceeded max depth") {
		t.Errorf("depth %d: %v, want encoding/json's depth error", maxDepth+1, err)
	}
}

func TestDecodeCopiesInput(t *testing.T) {
	t.Parallel()
	data := []byte(`{"id":"https://a/1","type":"Create","actor":"https://a/u","object":{"id":"https://a/n","type":"Note"}}`)
	want := string(data)
	a, err := ParseActivity(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = ' '
	}
	if string(a.Raw) != want || string(a.ObjectRaw) != `{"id":"https://a/n","type":"Note"}` || string(a.Object.Raw) != string(a.ObjectRaw) {
		t.Errorf("raw %s, object raw %s / %s after the input was overwritten", a.Raw, a.ObjectRaw, a.Object.Raw)
	}
	if cap(a.ObjectRaw) != len(a.ObjectRaw) {
		t.Errorf("ObjectRaw has room to grow into Raw: len %d cap %d", len(a.ObjectRaw), cap(a.ObjectRaw))
	}
}

func FuzzDecodeMatchesReference(f *testing.F) {
	for _, doc := range decodeCases {
		f.Add([]byte(doc))
	}
	addFixtures(f, "fediverse/*/activities/*.json", "fediverse/*/activities/*/*.json", "fediverse/*/objects/*.json")
	f.Fuzz(checkAgainstReference)
}

// FuzzReducersMatchReference compares the reducers of json.RawMessage
// properties (used by the actor and NodeInfo decoders) with the reference.
func FuzzReducersMatchReference(f *testing.F) {
	for _, s := range []string{
		`"x"`, `["", null, 1, "x"]`, `{"id": "x", "href": "y"}`, `{"Href": "y"}`, `[{"id": ""}, {"href": "z"}]`,
		`{"en": "a", "und": "b"}`, `{"fr": "a", "de": null}`, `{"fr": 1}`, `"2024-05-06T07:08:09Z"`, `["2024-05-06T07:08:09Z"]`,
		`  "x"  `, `"x" "y"`, `[`, `{"id": "\u00e9\ud800"}`, "\"\xff\"", `42`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		raw := json.RawMessage(b)
		if got, want := IDs(raw), refIDs(raw); !reflect.DeepEqual(got, want) {
			t.Fatalf("IDs(%q) = %q, reference %q", b, got, want)
		}
		if got, want := firstID(raw), refFirstID(raw); got != want {
			t.Fatalf("firstID(%q) = %q, reference %q", b, got, want)
		}
		if got, want := firstString(raw), refFirstString(raw); got != want {
			t.Fatalf("firstString(%q) = %q, reference %q", b, got, want)
		}
		if got, want := stringOrMap(raw), refStringOrMap(raw); got != want {
			t.Fatalf("stringOrMap(%q) = %q, reference %q", b, got, want)
		}
		if v, ok := validRaw(raw); ok {
			if got, want := vTime(v), refParseTime(raw); !got.Equal(want) {
				t.Fatalf("vTime(%q) = %v, reference %v", b, got, want)
			}
			if got, want := vTags(v), refParseTags(raw); !reflect.DeepEqual(got, want) {
				t.Fatalf("vTags(%q) = %+v, reference %+v", b, got, want)
			}
		}
		if _, ok := validRaw(raw); ok != json.Valid(b) && len(b) > 0 {
			// validRaw trims as bytes.TrimSpace does; json.Valid trims
			// JSON whitespace only.
			if trimmed := strings.TrimSpace(string(b)); trimmed == string(b) {
				t.Fatalf("validRaw(%q) = %v, json.Valid %v", b, ok, !ok)
			}
		}
	})
}
