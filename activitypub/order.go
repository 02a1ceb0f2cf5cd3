package activitypub

// Order kinds (OrderKey): a Create, the first of its key, or an Update;
// either is not sent once its object is deleted.
const (
	OrderCreate = "create"
	OrderUpdate = "update"
)

// OrderKey returns the order key of act, what it is about ("" when its
// deliveries are not ordered): the object of a Create, Update, Delete, Add
// or Remove; the actor, verb and object of a Follow, Like, Announce,
// EmojiReact or Block, which its Undo shares. kind is OrderCreate,
// OrderUpdate or "". Deliveries of one key to one inbox go in the order the
// activities were written in (package delivery, order.go).
func OrderKey(act *Activity) (key, kind string) {
	switch act.Type {
	case "Create":
		return act.ObjectID, OrderCreate
	case "Update":
		return act.ObjectID, OrderUpdate
	case "Delete", "Add", "Remove":
		return act.ObjectID, ""
	case "Follow", "Like", "Announce", "EmojiReact", "Block":
		return relationKey(act.Type, act.Actor, act.ObjectID), ""
	case "Undo":
		if o := act.Object; o != nil && o.Type != "" && o.ObjectID != "" {
			actor := o.Actor
			if actor == "" {
				actor = act.Actor
			}
			return relationKey(o.Type, actor, o.ObjectID), ""
		}
	}
	return "", ""
}

// Ordered reports whether activities of type typ may have an order key.
func Ordered(typ string) bool {
	switch typ {
	case "Create", "Update", "Delete", "Add", "Remove",
		"Follow", "Like", "Announce", "EmojiReact", "Block", "Undo":
		return true
	}
	return false
}

// relationKey is the key of a relation activity (a Follow, a Like...) and
// of its Undo: who did what to which object.
func relationKey(typ, actor, object string) string {
	if object == "" {
		return ""
	}
	return typ + " " + actor + " " + object
}
