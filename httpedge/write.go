package httpedge

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/courier-ap/courier/store"
)

// WriteJSON writes v as JSON (HTML characters unescaped, one trailing
// newline) with status and Content-Type ct. A value that cannot be encoded
// is a 500 with the JSON error body.
func WriteJSON(w http.ResponseWriter, status int, ct string, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, `{"error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	WriteRaw(w, status, ct, buf.Bytes())
}

// WriteRaw writes b with status and Content-Type ct, never sniffed.
func WriteRaw(w http.ResponseWriter, status int, ct string, b []byte) {
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Cursor parses a keyset cursor parameter (max_id, min_id) of courier's
// collections, the public listener's and the application's; "" is 0.
func Cursor(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, store.Errorf(store.EINVALID, "cursor %q is not a non-negative integer", v)
	}
	return n, nil
}
