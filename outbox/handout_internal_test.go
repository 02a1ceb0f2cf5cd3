package outbox

import (
	"fmt"
	"testing"
)

func laneJob(id int64, lane int) *job {
	return &job{row: Row{ID: id, Event: Event{Lane: lane}}}
}

// A handler takes the interactive rows in hand before the bulk rows claimed
// earlier, each lane in the order it was claimed; after close it gets what
// is left, then nothing.
func TestHandOutTakesInteractiveRowsFirst(t *testing.T) {
	h := newHandOut(16)
	for i := range int64(5) {
		h.put(laneJob(1+i, LaneBulk))
	}
	for i := range int64(3) {
		h.put(laneJob(10+i, LaneInteractive))
	}
	h.put(laneJob(6, LaneBulk))
	h.close()
	var got []int64
	for {
		j, ok := h.next()
		if !ok {
			break
		}
		got = append(got, j.row.ID)
	}
	if want := "[10 11 12 1 2 3 4 5 6]"; fmt.Sprint(got) != want {
		t.Fatalf("handed out %v, want %s", got, want)
	}
	if j, ok := h.next(); ok {
		t.Fatalf("next after the end = %v, want none", j.row.ID)
	}
}

// A handler waiting on an empty hand-out takes a row of either lane when it
// comes, and returns false when the hand-out closes.
func TestHandOutWaits(t *testing.T) {
	h := newHandOut(4)
	got := make(chan int64)
	go func() {
		defer close(got)
		for {
			j, ok := h.next()
			if !ok {
				return
			}
			got <- j.row.ID
		}
	}()
	h.put(laneJob(1, LaneBulk))
	if id := <-got; id != 1 {
		t.Fatalf("got row %d, want the bulk row 1", id)
	}
	h.put(laneJob(2, LaneInteractive))
	if id := <-got; id != 2 {
		t.Fatalf("got row %d, want the interactive row 2", id)
	}
	h.close()
	if id, ok := <-got; ok {
		t.Fatalf("got row %d after close, want the handler to end", id)
	}
}
