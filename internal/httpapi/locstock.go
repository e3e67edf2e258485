package httpapi

import (
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// Stock in one location, and transfers between locations.

type setLocationStockRequest struct {
	Available *number `json:"available"`
	// ExpectedAvailable makes the set a compare-and-set on the location's
	// available units.
	ExpectedAvailable *number `json:"expected_available"`
}

// count reads an optional count (0..orders.MaxRestock), -1 when it is not
// one (refused by validation).
func count(n *number) int64 {
	if v, err := strconv.ParseInt(string(*n), 10, 64); err == nil && v >= 0 && v <= orders.MaxRestock {
		return v
	}
	return -1
}

func (s *server) setLocationStock(c *gin.Context) {
	var req setLocationStockRequest
	if err := s.decode(c, &req); err != nil {
		s.problem(c, err)
		return
	}
	set := orders.StockSet{Available: -1} // missing: refused by validation
	if req.Available != nil {
		set.Available = count(req.Available)
	}
	if req.ExpectedAvailable != nil {
		e := count(req.ExpectedAvailable)
		set.ExpectedAvailable = &e
	}
	st, created, err := s.stock.SetLocationStock(c.Request.Context(), c.Param("sku"), c.Param("location"), set)
	s.stocked(c, st, created, err)
}

func (s *server) restockLocation(c *gin.Context) {
	var req restockRequest
	key, ok := s.request(c, s.decode, &req)
	if !ok {
		return
	}
	st, err := s.stock.RestockLocation(c.Request.Context(), c.Param("sku"), c.Param("location"), quantity(req.Quantity, orders.MaxRestock), key)
	if err == nil && st.Replayed {
		c.Header("Idempotent-Replayed", "true")
	}
	s.stocked(c, st.Stock, st.Created, err)
}

type transferRequest struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Quantity number `json:"quantity"`
}

func (s *server) transfer(c *gin.Context) {
	var req transferRequest
	key, ok := s.request(c, s.decode, &req)
	if !ok {
		return
	}
	t := orders.Transfer{From: req.From, To: req.To, Quantity: quantity(req.Quantity, orders.MaxRestock)}
	st, err := s.stock.Transfer(c.Request.Context(), c.Param("sku"), t, key)
	if err == nil && st.Replayed {
		c.Header("Idempotent-Replayed", "true")
	}
	s.stocked(c, st.Stock, false, err)
}
