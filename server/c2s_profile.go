package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/courier-ap/courier/activitypub"
	"github.com/courier-ap/courier/store"
)

// Client-to-server writes of the actor's profile and pinned posts.
//
// An Update of the actor sets what it names among name, summary, icon,
// image (an Image with url and mediaType; a URL alone is taken as one),
// attachment (PropertyValue fields, kept as plain text: see store.FieldText),
// manuallyApprovesFollowers, discoverable, indexable and alsoKnownAs; null
// clears icon, image, attachment and alsoKnownAs. Image URLs must be
// absolute https URLs (http too with Config.AllowPrivateAddresses),
// alsoKnownAs absolute http(s) URLs. A property of the served document
// courier assigns (id, type, inbox, publicKey...) may be sent back
// unchanged; changed, it is refused, and a property courier does not keep
// is refused by name (422), so that nothing the client sent is silently
// lost. The Update is federated to followers, as for name and summary.
// interactionPolicy.canQuote sets the actor's default quote policy, which
// its objects published from then on without one of their own carry
// (store.SetQuotePolicy); it is not part of the actor's document.
//
// An Add or Remove whose target is the actor's featured collection pins
// or unpins an own object (store.Feature); it is federated to followers
// with that target, which Mastodon reads.

// profileSettable are the properties an Update of the actor sets.
var profileSettable = map[string]bool{
	"name": true, "summary": true, "icon": true, "image": true, "attachment": true,
	"manuallyApprovesFollowers": true, "discoverable": true, "indexable": true, "alsoKnownAs": true,
	"interactionPolicy": true,
}

// profileIgnored are the properties of an Update of the actor that courier
// assigns itself whatever the client sends.
var profileIgnored = map[string]bool{"@context": true, "id": true, "updated": true}

// updateActor applies the client's Update of its own actor, raw being the
// embedded actor.
func (s *Server) updateActor(r *http.Request, actor *store.Actor, raw json.RawMessage) (*store.Activity, error) {
	var props map[string]json.RawMessage
	if err := json.Unmarshal(raw, &props); err != nil {
		return nil, store.Errorf(store.EINVALID, "the updated actor is not a JSON object: %v", err)
	}
	current, err := s.currentActorDoc(actor)
	if err != nil {
		return nil, err
	}
	var unknown, fixed []string
	for k, v := range props {
		switch {
		case profileSettable[k] || profileIgnored[k]:
		case current[k] != nil:
			if !sameJSON(current[k], v) {
				fixed = append(fixed, k)
			}
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, store.Errorf(store.EUNPROCESSABLE, "an Update of the actor cannot carry %s: courier does not keep %s",
			strings.Join(unknown, ", "), plural(len(unknown), "it", "them"))
	}
	if len(fixed) > 0 {
		slices.Sort(fixed)
		return nil, store.Errorf(store.EUNPROCESSABLE, "%s of the actor cannot be changed by an Update (send %s unchanged or leave %s out)",
			strings.Join(fixed, ", "), plural(len(fixed), "it", "them"), plural(len(fixed), "it", "them"))
	}

	var u store.ActorUpdate
	var p store.ProfileUpdate
	profile := false
	for _, k := range []string{"name", "summary"} {
		v, ok := props[k]
		if !ok {
			continue
		}
		text, err := textProp(k, v)
		if err != nil {
			return nil, err
		}
		if k == "name" {
			u.DisplayName = &text
		} else {
			u.Summary = &text
		}
	}
	for k, dst := range map[string]**bool{"manuallyApprovesFollowers": &u.ManuallyApprovesFollowers,
		"discoverable": &p.Discoverable, "indexable": &p.Indexable} {
		v, ok := props[k]
		if !ok {
			continue
		}
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return nil, store.Errorf(store.EUNPROCESSABLE, "%s must be true or false", k)
		}
		*dst = &b
		profile = profile || k != "manuallyApprovesFollowers"
	}
	for k, set := range map[string]struct {
		flag *bool
		img  **store.Image
	}{"icon": {&p.SetIcon, &p.Icon}, "image": {&p.SetImage, &p.Image}} {
		v, ok := props[k]
		if !ok {
			continue
		}
		img, err := s.imageProp(k, v)
		if err != nil {
			return nil, err
		}
		*set.flag, *set.img, profile = true, img, true
	}
	if v, ok := props["attachment"]; ok {
		if p.Fields, err = fieldsProp(v); err != nil {
			return nil, err
		}
		p.SetFields, profile = true, true
	}
	if v, ok := props["alsoKnownAs"]; ok {
		if !isNull(v) {
			var one string
			var list []string
			switch {
			case json.Unmarshal(v, &one) == nil:
				list = []string{one}
			case json.Unmarshal(v, &list) == nil:
			default:
				return nil, store.Errorf(store.EUNPROCESSABLE, "alsoKnownAs must be a URL or a list of URLs")
			}
			p.AlsoKnownAs = list
		}
		p.SetAlsoKnownAs, profile = true, true
	}
	if profile {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		u.Profile = &p
	}
	if v, ok := props["interactionPolicy"]; ok {
		var policy any
		if err := json.Unmarshal(v, &policy); err != nil {
			return nil, store.Errorf(store.EUNPROCESSABLE, "interactionPolicy must be an object")
		}
		cq, has, err := store.ParseCanQuote(policy)
		if err != nil {
			return nil, err
		}
		if !has {
			return nil, store.Errorf(store.EUNPROCESSABLE, "interactionPolicy of the actor sets canQuote only; it has none")
		}
		if _, err := s.st.SetQuotePolicy(r.Context(), actor, cq); err != nil {
			return nil, err
		}
	}
	_, act, err := s.st.UpdateActor(r.Context(), actor.Name, u)
	return act, err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// currentActorDoc is the actor's served document as properties.
func (s *Server) currentActorDoc(actor *store.Actor) (map[string]json.RawMessage, error) {
	b, err := s.st.ActorJSON(actor)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// sameJSON reports whether two JSON values are equal as values.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// textProp reads a string property; null is "".
func textProp(k string, v json.RawMessage) (string, error) {
	if isNull(v) {
		return "", nil
	}
	var t string
	if err := json.Unmarshal(v, &t); err != nil {
		return "", store.Errorf(store.EUNPROCESSABLE, "%s must be a string", k)
	}
	return t, nil
}

// imageProp reads an icon or image: null (cleared), a URL, or an Image
// with url and mediaType.
func (s *Server) imageProp(k string, v json.RawMessage) (*store.Image, error) {
	if isNull(v) {
		return nil, nil
	}
	var img store.Image
	var u string
	if json.Unmarshal(v, &u) == nil {
		img.URL = u
	} else {
		var props map[string]json.RawMessage
		if err := json.Unmarshal(v, &props); err != nil {
			return nil, store.Errorf(store.EUNPROCESSABLE, "%s must be an Image or a URL", k)
		}
		for _, p := range slices.Sorted(maps.Keys(props)) {
			pv := props[p]
			switch p {
			case "type":
				if t, _ := textProp(p, pv); t != "Image" {
					return nil, store.Errorf(store.EUNPROCESSABLE, "%s must be an Image, not %s", k, pv)
				}
			case "url":
				if ids := activitypub.IDs(pv); len(ids) == 1 {
					img.URL = ids[0]
				} else {
					return nil, store.Errorf(store.EUNPROCESSABLE, "%s needs one url", k)
				}
			case "mediaType":
				t, err := textProp(k+" mediaType", pv)
				if err != nil {
					return nil, err
				}
				img.MediaType = t
			default:
				return nil, store.Errorf(store.EUNPROCESSABLE, "%s carries %s, which courier does not keep (only type, url and mediaType)", k, p)
			}
		}
	}
	pu, err := url.Parse(img.URL)
	if err != nil || pu.Host == "" || (pu.Scheme != "https" && !(pu.Scheme == "http" && s.cfg.AllowPrivateAddresses)) {
		return nil, store.Errorf(store.EUNPROCESSABLE, "%s url %q must be an absolute https URL", k, img.URL)
	}
	return &img, nil
}

// fieldsProp reads attachment: PropertyValues (a list or one); null or []
// clears the fields.
func fieldsProp(v json.RawMessage) ([]store.ProfileField, error) {
	if isNull(v) {
		return nil, nil
	}
	var list []map[string]json.RawMessage
	if json.Unmarshal(v, &list) != nil {
		var one map[string]json.RawMessage
		if err := json.Unmarshal(v, &one); err != nil {
			return nil, store.Errorf(store.EUNPROCESSABLE, "attachment must be a list of PropertyValue")
		}
		list = []map[string]json.RawMessage{one}
	}
	var out []store.ProfileField
	for i, props := range list {
		var f store.ProfileField
		var err error
		if t, _ := textProp("type", props["type"]); t != "PropertyValue" {
			return nil, store.Errorf(store.EUNPROCESSABLE, "attachment %d must be a PropertyValue, not %s", i, props["type"])
		}
		for _, p := range slices.Sorted(maps.Keys(props)) {
			pv := props[p]
			switch p {
			case "type":
			case "name":
				f.Name, err = textProp("attachment name", pv)
			case "value":
				f.Value, err = textProp("attachment value", pv)
			default:
				return nil, store.Errorf(store.EUNPROCESSABLE, "attachment %d carries %s, which courier does not keep (only type, name and value)", i, p)
			}
			if err != nil {
				return nil, err
			}
		}
		if f.Name, err = store.FieldText(fmt.Sprintf("attachment %d name", i), f.Name); err != nil {
			return nil, err
		}
		if f.Value, err = store.FieldText(fmt.Sprintf("attachment %d value", i), f.Value); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// addRemove pins (Add) or unpins (Remove) an own object in the actor's
// featured collection.
func (s *Server) addRemove(r *http.Request, actor *store.Actor, typ string, req *c2sWire) (*store.Activity, error) {
	target := objectID(req.Target)
	if featured := s.uris.Featured(actor.Name); target != featured {
		return nil, store.Errorf(store.EUNPROCESSABLE, "%s needs the target %s (the actor's featured collection), not %q", typ, featured, target)
	}
	id := objectID(req.Object)
	if id == "" {
		return nil, store.Errorf(store.EINVALID, "%s needs an object", typ)
	}
	if !s.uris.IsLocal(id) {
		return nil, store.Errorf(store.EUNPROCESSABLE, "only the actor's own objects can be featured, not %q", id)
	}
	if typ == "Add" {
		return s.st.Feature(r.Context(), actor, id)
	}
	return s.st.Unfeature(r.Context(), actor, id)
}

// featuredItems are the objects a pinned, embedded as served (without
// their likes and shares); a pinned object gone meanwhile is left out.
func (s *Server) featuredItems(r *http.Request, a *store.Actor) ([]any, error) {
	ids, err := s.st.Featured(r.Context(), a.ID)
	if err != nil {
		return nil, err
	}
	items := make([]any, 0, len(ids))
	for _, id := range ids {
		o, err := s.st.ObjectByURI(r.Context(), id)
		if store.ErrorCode(err) == store.ENOTFOUND {
			continue
		}
		if err != nil {
			return nil, err
		}
		if o.Deleted() || len(o.Document) == 0 {
			continue
		}
		items = append(items, json.RawMessage(o.Document))
	}
	return items, nil
}
