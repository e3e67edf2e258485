package events

import (
	"context"
	"fmt"

	"github.com/stockguard/stockguard/internal/orders"
)

// errNoEvents is the feed's answer on a service given no EventStore: events
// are turned off (--events=false).
var errNoEvents = fmt.Errorf("%w: stock events are turned off on this replica (--events=false)", orders.ErrNotFound)

// Events lists up to limit events of the feed, oldest first, after the event
// whose id is startingAfter (from the first when empty), and whether more
// follow. It reads the placed events only: an event is in the feed once the
// relay gave it its position, so a page never changes after it was read,
// except for events purged past the retention.
func (s *Service) Events(ctx context.Context, startingAfter string, limit int) ([]orders.Event, bool, error) {
	var after int64
	var errs []orders.FieldError
	if startingAfter != "" {
		p, err := orders.EventPosition(startingAfter)
		if err != nil {
			errs = append(errs, orders.FieldError{Field: "starting_after", Message: fmt.Sprintf("is not an event id: evt_ and a positive number, not %q", startingAfter)})
		}
		after = p
	}
	if limit < 1 || limit > orders.MaxPage {
		errs = append(errs, orders.FieldError{Field: "limit", Message: fmt.Sprintf("must be between 1 and %d", orders.MaxPage)})
	}
	if len(errs) > 0 {
		return nil, false, &orders.ValidationError{Fields: errs}
	}
	if s.events == nil {
		return nil, false, errNoEvents
	}
	out, err := s.events.Events(ctx, after, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("events: %w", err)
	}
	return out[:min(len(out), limit)], len(out) > limit, nil
}
