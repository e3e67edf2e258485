package batch_test

import (
	"context"
	"testing"

	"github.com/stockguard/stockguard/internal/batch"
)

// A Selective lead peeks at what waits without taking it, takes what fits,
// and leaves the rest, in arrival order, to the next lead; each caller gets
// its own answer.
func TestSelectiveTakesWhatFitsAndLeavesTheRest(t *testing.T) {
	h := newSelectiveHarness(t, batch.Config{})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l1 := recv(t, h.leads, "lead 1")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2, 3)...)
	wantItems(t, l1.peek(), 1, 2, 3)
	wantItems(t, l1.peek(), 1, 2, 3) // a peek takes nothing
	// Items that arrive after the peek (while the lead waits for its locks).
	chs = append(chs, h.enqueueAll("k", 4, 5, 6)...)
	odd := func(n int) bool { return n%2 == 1 }
	wantItems(t, l1.takeIf(odd), 1, 3, 5)
	wantItems(t, l1.takeIf(nil), 1, 3, 5) // take's first call decided the batch
	if got := l1.peek(); got != nil {
		t.Fatalf("peek after take: %v, want nothing", got)
	}
	chs = append(chs, h.enqueueAll("k", 7)...)
	l1.ret <- outcome{results: []string{answerFor(1), answerFor(3), answerFor(5)}}
	for _, i := range []int{1, 3, 5} {
		wantAnswer(t, chs[i-1], i)
	}
	l2 := recv(t, h.leads, "lead 2")
	wantItems(t, l2.peek(), 2, 4, 6, 7)
	wantItems(t, serve(l2), 2, 4, 6, 7)
	for _, i := range []int{2, 4, 6, 7} {
		wantAnswer(t, chs[i-1], i)
	}
	wantBatches(t, h, 3, 4)
}

// peek and take see at most MaxBatch items, and only those whose callers
// still wait.
func TestSelectiveHonoursMaxBatchAndLeavers(t *testing.T) {
	h := newSelectiveHarness(t, batch.Config{MaxBatch: 2})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l1 := recv(t, h.leads, "lead 1")
	gone, leave := context.WithCancel(context.Background())
	left, _ := h.enqueue(gone, "k", 2)
	chs := append([]<-chan result{first}, h.enqueueAll("k", 3, 4)...)
	wantItems(t, l1.peek(), 1, 2)
	leave()
	_ = wantErr(t, left, 2, context.Canceled)
	wantItems(t, l1.peek(), 1, 3)
	wantItems(t, l1.takeIf(func(n int) bool { return n != 3 }), 1, 4)
	l1.ret <- outcome{results: []string{answerFor(1), answerFor(4)}}
	wantAnswer(t, chs[0], 1)
	wantAnswer(t, chs[2], 4)
	wantItems(t, serve(recv(t, h.leads, "lead 2")), 3)
	wantAnswer(t, chs[1], 3)
	wantBatches(t, h, 2, 1)
}
