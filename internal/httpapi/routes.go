package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// routes lists every route of the API, each with the scopes of which its
// caller needs one (admin has them all). Only health, readiness and the
// contract are open; api/openapi.yaml declares the same (a test compares).
func (s *server) routes(r *gin.Engine) {
	s.route(r, http.MethodPost, "/v1/orders", s.placeOrder, orders.ScopeOrdersWrite)
	s.route(r, http.MethodGet, "/v1/orders", s.listOrders, orders.ScopeOrdersRead)
	s.route(r, http.MethodGet, "/v1/orders/:id", s.getOrder, orders.ScopeOrdersRead)
	s.route(r, http.MethodPost, "/v1/orders/:id/cancel", s.cancelOrder, orders.ScopeOrdersWrite)
	s.route(r, http.MethodPost, "/v1/reservations", s.placeHold, orders.ScopeHoldsWrite)
	s.route(r, http.MethodGet, "/v1/reservations", s.listHolds, orders.ScopeHoldsWrite, orders.ScopeOrdersRead)
	s.route(r, http.MethodGet, "/v1/reservations/:id", s.getHold, orders.ScopeHoldsWrite, orders.ScopeOrdersRead)
	s.route(r, http.MethodPost, "/v1/reservations/:id/extend", s.extendHold, orders.ScopeHoldsWrite)
	s.route(r, http.MethodPost, "/v1/reservations/:id/confirm", s.confirmHold, orders.ScopeHoldsWrite)
	s.route(r, http.MethodPost, "/v1/reservations/:id/release", s.releaseHold, orders.ScopeHoldsWrite)
	s.route(r, http.MethodGet, "/v1/skus", s.listSKUs, orders.ScopeStockRead)
	s.route(r, http.MethodGet, "/v1/skus/:sku", s.getSKU, orders.ScopeStockRead)
	s.route(r, http.MethodPut, "/v1/skus/:sku", s.setStock, orders.ScopeStockWrite)
	s.route(r, http.MethodPost, "/v1/skus/:sku/restock", s.restock, orders.ScopeStockWrite)
	s.route(r, http.MethodPut, "/v1/skus/:sku/locations/:location", s.setLocationStock, orders.ScopeStockWrite)
	s.route(r, http.MethodPost, "/v1/skus/:sku/locations/:location/restock", s.restockLocation, orders.ScopeStockWrite)
	s.route(r, http.MethodPost, "/v1/skus/:sku/transfers", s.transfer, orders.ScopeStockWrite)
	s.route(r, http.MethodPost, "/v1/locations", s.createLocation, orders.ScopeStockWrite)
	s.route(r, http.MethodGet, "/v1/locations", s.listLocations, orders.ScopeStockRead)
	s.route(r, http.MethodGet, "/v1/locations/:id", s.getLocation, orders.ScopeStockRead)
	s.route(r, http.MethodPatch, "/v1/locations/:id", s.patchLocation, orders.ScopeStockWrite)
	s.route(r, http.MethodGet, "/v1/events", s.listEvents, orders.ScopeEventsRead)
	s.route(r, http.MethodPost, "/v1/events/republish", s.republishEvents, orders.ScopeAdmin)
	s.route(r, http.MethodGet, "/v1/audit", s.audit, orders.ScopeAdmin)
	s.route(r, http.MethodPost, "/v1/webhooks", s.createWebhook, orders.ScopeWebhooksWrite)
	s.route(r, http.MethodGet, "/v1/webhooks", s.listWebhooks, orders.ScopeWebhooksWrite)
	s.route(r, http.MethodGet, "/v1/webhooks/:id", s.getWebhook, orders.ScopeWebhooksWrite)
	s.route(r, http.MethodPatch, "/v1/webhooks/:id", s.updateWebhook, orders.ScopeWebhooksWrite)
	s.route(r, http.MethodDelete, "/v1/webhooks/:id", s.deleteWebhook, orders.ScopeWebhooksWrite)
	s.route(r, http.MethodGet, "/v1/webhooks/:id/failures", s.listWebhookFailures, orders.ScopeWebhooksWrite)
	if s.clients != nil {
		s.route(r, http.MethodPost, "/v1/clients", s.createClient, orders.ScopeAdmin)
		s.route(r, http.MethodGet, "/v1/clients", s.listClients, orders.ScopeAdmin)
		s.route(r, http.MethodGet, "/v1/clients/:id", s.getClient, orders.ScopeAdmin)
		s.route(r, http.MethodPatch, "/v1/clients/:id", s.updateClient, orders.ScopeAdmin)
		s.route(r, http.MethodPost, "/v1/clients/:id/keys", s.createKey, orders.ScopeAdmin)
		s.route(r, http.MethodGet, "/v1/clients/:id/keys", s.listKeys, orders.ScopeAdmin)
		s.route(r, http.MethodDelete, "/v1/clients/:id/keys/:key", s.revokeKey, orders.ScopeAdmin)
	}

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	if s.metrics != nil { // nil: served on a listener of its own (--metrics-addr), without a credential
		s.route(r, http.MethodGet, "/metrics", gin.WrapH(s.metrics), orders.ScopeAdmin)
	}
	r.GET("/openapi.yaml", s.openapi)

	r.NoRoute(func(c *gin.Context) { s.problem(c, errNoRoute) })
	r.NoMethod(func(c *gin.Context) { s.problem(c, errNoMethod) })
}

// route serves method and path with h, to callers with one of scopes, and
// records the scopes for the contract's test.
func (s *server) route(r *gin.Engine, method, path string, h gin.HandlerFunc, scopes ...orders.Scope) {
	s.scopes[method+" "+path] = scopes
	r.Handle(method, path, s.routeMetrics(method, path), s.need(scopes...), h)
}

// RouteScopes returns the scopes of every route, by "METHOD /path" (gin's
// :param form), of which a caller needs one.
func RouteScopes() map[string][]orders.Scope {
	gin.SetMode(gin.ReleaseMode)
	s := &server{scopes: map[string][]orders.Scope{}, clients: noClients{}, metrics: http.NotFoundHandler()}
	s.routes(gin.New())
	return s.scopes
}

// clientsAPI names Clients for embedding: a field named Clients would hide
// the method of that name.
type clientsAPI = Clients

// noClients stands for a Clients where none is called (RouteScopes).
type noClients struct{ clientsAPI }
