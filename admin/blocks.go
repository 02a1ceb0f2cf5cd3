package admin

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/courier-ap/courier/store"
)

// maxReasonLen bounds a domain block's reason.
const maxReasonLen = 1000

func (a *API) listBlocks(w http.ResponseWriter, r *http.Request) error {
	blocks, err := a.cfg.Store.DomainBlocks(r.Context())
	if err != nil {
		return err
	}
	out := DomainBlockList{DomainBlocks: make([]DomainBlock, 0, len(blocks))}
	for _, b := range blocks {
		out.DomainBlocks = append(out.DomainBlocks, DomainBlock{Domain: b.Domain, Reason: b.Reason,
			CreatedAt: utc(b.CreatedAt)})
	}
	return writeJSON(w, http.StatusOK, out)
}

// blockRequest is the body of POST /admin/domain-blocks.
type blockRequest struct {
	Domain string `json:"domain"`
	Reason string `json:"reason"`
}

func (a *API) addBlock(w http.ResponseWriter, r *http.Request) error {
	var req blockRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	domain := store.NormalizeDomain(req.Domain)
	if domain == "" {
		return errorf(EINVALID, "domain %q: want a domain name such as spam.example", req.Domain)
	}
	req.Reason = strings.TrimSpace(req.Reason)
	if len(req.Reason) > maxReasonLen {
		return errorf(EINVALID, "reason is longer than %d bytes", maxReasonLen)
	}
	if err := a.cfg.Store.AddDomainBlock(r.Context(), domain, req.Reason); err != nil {
		return err
	}
	a.log.InfoContext(r.Context(), "admin: domain blocked", "domain", domain, "reason", req.Reason, "count", 1)
	return writeJSON(w, http.StatusCreated, DomainBlock{Domain: domain, Reason: req.Reason})
}

func (a *API) removeBlock(w http.ResponseWriter, r *http.Request) error {
	raw := mux.Vars(r)["domain"]
	domain := store.NormalizeDomain(raw)
	if domain == "" {
		return errorf(EINVALID, "domain %q: want a domain name such as spam.example", raw)
	}
	if err := a.cfg.Store.RemoveDomainBlock(r.Context(), domain); err != nil {
		if store.ErrorCode(err) == store.ENOTFOUND {
			return errorf(ENOTFOUND, "domain %s is not blocked", domain)
		}
		return err
	}
	a.log.InfoContext(r.Context(), "admin: domain unblocked", "domain", domain, "count", 1)
	return writeJSON(w, http.StatusOK, ActionResult{Action: "unblock", Domain: domain, Message: "domain unblocked"})
}

// decodeBody reads a JSON request body into v, refusing unknown fields,
// trailing data and other content types.
func decodeBody(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return errorf(EINVALID, "content type %q: want application/json", ct)
		}
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return errorf(EINVALID, "empty body: want a JSON object")
		}
		return errorf(EINVALID, "body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errorf(EINVALID, "body: trailing data after the JSON object")
	}
	return nil
}
