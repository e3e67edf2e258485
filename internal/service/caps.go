package service

import (
	"context"
	"errors"

	"github.com/stockguard/stockguard/internal/orders"
)

// Caps on what one caller may take (I9). The strategies that hold the per-SKU
// locks decide them with the stock, in the batch, in arrival order: under the
// locks the batch reads the counters its placements add to, and the SKUs'
// limits per customer, from the database (one statement, Store.Caps), and a
// placement that would take a counter past its cap is refused on its own,
// with nothing of it written, as a shortage is. The store's commit guards the
// same counters again (a CHECK on each counter's row, under its row lock), so
// that no interleaving (a lock lost, a strategy without locks) can take a
// counter past its cap: a refusal of the database is then decided again on
// counters read anew.

// capView is what a batch decides the caps on: the counters and the limits
// per customer read under its locks, as its decisions so far left them, and
// each client counter's cap (the smallest its holds in the batch carry, as
// the store guards it).
type capView struct {
	caps    orders.Caps
	maxHeld map[orders.ClientSKU]int64
}

// readCaps reads the counters the live placements add to; nil when none adds
// to any.
func (s *Service) readCaps(ctx context.Context, ps []orders.Placement, live []int) (*capView, error) {
	var held []orders.ClientSKU
	var units []orders.CustomerSKU
	maxHeld := map[orders.ClientSKU]int64{}
	for _, i := range live {
		h, u := orders.CapKeys(ps[i])
		for _, k := range h {
			if m, ok := maxHeld[k]; !ok || ps[i].MaxHeld < m {
				maxHeld[k] = ps[i].MaxHeld
			}
		}
		held, units = append(held, h...), append(units, u...)
	}
	if len(held) == 0 && len(units) == 0 {
		return nil, nil
	}
	caps, err := s.store.Caps(ctx, dedup(held), dedup(units))
	if err != nil {
		return nil, err
	}
	return &capView{caps: caps, maxHeld: maxHeld}, nil
}

func dedup[K comparable](keys []K) []K {
	seen := make(map[K]bool, len(keys))
	out := keys[:0]
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// refusal is the cap p would exceed on the counters as they are, or nil.
func (v *capView) refusal(p orders.Placement) *orders.CapError {
	if v == nil {
		return nil
	}
	o := p.Order
	for _, it := range o.Items {
		n := int64(it.Quantity)
		if p.Hold != nil && o.ClientID != "" {
			k := orders.ClientSKU{ClientID: o.ClientID, SKU: it.SKU}
			limit, ok := v.maxHeld[k]
			if !ok {
				limit = p.MaxHeld
			}
			if have := v.caps.Held[k]; have+n > limit {
				return &orders.CapError{Cap: orders.ErrHoldQuotaExceeded, SKU: it.SKU, Held: have, Limit: limit}
			}
		}
		if o.Customer != "" {
			if limit, ok := v.caps.MaxPerCustomer[it.SKU]; ok {
				k := orders.CustomerSKU{SKU: it.SKU, ClientID: o.ClientID, Customer: o.Customer}
				if have := v.caps.Units[k]; have+n > limit {
					return &orders.CapError{Cap: orders.ErrCustomerLimitExceeded, SKU: it.SKU, Held: have, Limit: limit}
				}
			}
		}
	}
	return nil
}

// take counts p, placed, in the counters.
func (v *capView) take(p orders.Placement) {
	if v == nil {
		return
	}
	held, units := orders.CapKeys(p)
	for i, it := range p.Order.Items {
		if len(held) > 0 {
			v.caps.Held[held[i]] += int64(it.Quantity)
		}
		if len(units) > 0 {
			v.caps.Units[units[i]] += int64(it.Quantity)
		}
	}
}

// capRefusal is the answer to p when the store refused it for a cap (err):
// the refusal with the counters read now, or err as it came when they do not
// tell (they moved meanwhile).
func (s *Service) capRefusal(ctx context.Context, p orders.Placement, err error) error {
	v, rerr := s.readCaps(ctx, []orders.Placement{p}, []int{0})
	if rerr != nil {
		return err
	}
	if refusal := v.refusal(p); refusal != nil {
		return refusal
	}
	// The counters moved since (units came back): the refusal stands, told
	// with them as they are now, on the first SKU of its kind.
	var capErr *orders.CapError
	if !errors.As(err, &capErr) || len(p.Order.Items) == 0 {
		return err
	}
	out := &orders.CapError{Cap: capErr.Cap}
	for _, it := range p.Order.Items {
		out.SKU = it.SKU
		if errors.Is(capErr.Cap, orders.ErrHoldQuotaExceeded) {
			out.Held, out.Limit = v.caps.Held[orders.ClientSKU{ClientID: p.Order.ClientID, SKU: it.SKU}], p.MaxHeld
			break
		}
		if limit, ok := v.caps.MaxPerCustomer[it.SKU]; ok {
			out.Held, out.Limit = v.caps.Units[orders.CustomerSKU{SKU: it.SKU, ClientID: p.Order.ClientID, Customer: p.Order.Customer}], limit
			break
		}
	}
	return out
}

// isCapped says whether err is the refusal of a cap.
func isCapped(err error) bool {
	return errors.Is(err, orders.ErrHoldQuotaExceeded) || errors.Is(err, orders.ErrCustomerLimitExceeded)
}
