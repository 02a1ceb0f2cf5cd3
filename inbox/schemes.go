package inbox

import (
	"context"

	"github.com/courier-ap/courier/activitypub"
)

// Schemes learns which remote hosts speak RFC 9421: each request whose RFC
// 9421 signature verified is reported for its sender's host (the host of
// the key id), with the signature's alg parameter, so that delivery signs
// to that host with RFC 9421 too. *delivery.Schemes implements it.
type Schemes interface {
	AcceptsRFC9421(ctx context.Context, host, alg string)
}

// reportScheme reports a verified RFC 9421 signature sig from host.
func (h *Handler) reportScheme(ctx context.Context, sig *activitypub.SignatureParams, host string) {
	if h.cfg.Schemes == nil || !sig.IsMessageSignature() || host == "" {
		return
	}
	h.cfg.Schemes.AcceptsRFC9421(ctx, host, sig.Algorithm)
}
