package client

// Item is a line of an order or a hold as requested.
type Item struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
	// Location, when set, is the one location the line's units must come
	// from; left out, the service allocates the line.
	Location string `json:"location,omitempty"`
	// Split false keeps a line the service allocates in one location; nil
	// or true lets it split over as many as it takes.
	Split *bool `json:"split,omitempty"`
}

// Line is a line of an order or a hold as kept (merged per SKU), or of a
// confirm.
type Line struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Allocation says how many units of a SKU came from (or are held in) a
// location.
type Allocation struct {
	SKU      string `json:"sku"`
	Location string `json:"location"`
	Quantity int    `json:"quantity"`
}

// Stock is a SKU's counters: stocked == available + reserved + sold, plus
// backordered when orders sold beyond what was available (I1).
type Stock struct {
	SKU       string `json:"sku"`
	Available int    `json:"available"`
	Reserved  int    `json:"reserved"`
	Sold      int    `json:"sold"`
	Stocked   int    `json:"stocked"`
	// MaxPerCustomer is the SKU's limit per customer; 0 when it has none.
	MaxPerCustomer int `json:"max_per_customer,omitempty"`
	// LowStockThreshold is the level that writes sku.low_stock; 0: none.
	LowStockThreshold int `json:"low_stock_threshold,omitempty"`
	// BackorderLimit is how many units orders may sell beyond available.
	BackorderLimit int `json:"backorder_limit,omitempty"`
	// Backordered is the units owed until a restock fills them.
	Backordered int `json:"backordered,omitempty"`
	// Locations are the SKU's counts per location (read one SKU at a time).
	Locations []LocationStock `json:"locations,omitempty"`
}

// LocationStock is a SKU's counters in one location.
type LocationStock struct {
	Location  string `json:"location"`
	Available int    `json:"available"`
	Reserved  int    `json:"reserved"`
	Sold      int    `json:"sold"`
	Stocked   int    `json:"stocked"`
}

// Page is one page of a list, as the API answers it. The List methods page
// through them by themselves; Page is for those who read the JSON.
type Page[T any] struct {
	Object  string `json:"object"`
	URL     string `json:"url"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}
