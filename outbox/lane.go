package outbox

// Lanes order the claims of due rows (Event.Lane). A claim takes the due
// rows of LaneInteractive first, oldest first, and gives at least
// BulkShare of every claim to LaneBulk rows when any are due, so neither
// lane starves the other: an Accept, a reply or a direct message is never
// queued behind a bulk fan-out, and a bulk fan-out still moves while
// interactive work keeps coming.
const (
	// LaneInteractive is the default lane: inbound imports, fan-outs and
	// deliveries of activities with few recipients.
	LaneInteractive = 0
	// LaneBulk is for the deliveries of large fan-outs.
	LaneBulk = 1
)

// BulkShare is the least share of a claim that goes to due LaneBulk rows
// (one in four).
const BulkShare = 4

// LaneName is the name of a lane for metrics and the admin API.
func LaneName(lane int) string {
	if lane == LaneBulk {
		return "bulk"
	}
	return "interactive"
}
