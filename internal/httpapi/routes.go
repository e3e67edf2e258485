package httpapi

import (
	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/internal/orders"
)

// routes lists every route of the API, each with the scopes of which its
// caller needs one (admin has them all). Only health, readiness and the
// contract are open; api/openapi.yaml declares the same (a test compares).
func (s *server) routes(r *gin.Engine) {
	r.POST("/v1/orders", s.need(orders.ScopeOrdersWrite), s.placeOrder)
	r.GET("/v1/orders", s.need(orders.ScopeOrdersRead), s.listOrders)
	r.GET("/v1/orders/:id", s.need(orders.ScopeOrdersRead), s.getOrder)
	r.POST("/v1/orders/:id/cancel", s.need(orders.ScopeOrdersWrite), s.cancelOrder)
	r.POST("/v1/reservations", s.need(orders.ScopeHoldsWrite), s.placeHold)
	r.GET("/v1/reservations", s.need(orders.ScopeHoldsWrite, orders.ScopeOrdersRead), s.listHolds)
	r.GET("/v1/reservations/:id", s.need(orders.ScopeHoldsWrite, orders.ScopeOrdersRead), s.getHold)
	r.POST("/v1/reservations/:id/extend", s.need(orders.ScopeHoldsWrite), s.extendHold)
	r.POST("/v1/reservations/:id/confirm", s.need(orders.ScopeHoldsWrite), s.confirmHold)
	r.POST("/v1/reservations/:id/release", s.need(orders.ScopeHoldsWrite), s.releaseHold)
	r.GET("/v1/skus", s.need(orders.ScopeStockRead), s.listSKUs)
	r.GET("/v1/skus/:sku", s.need(orders.ScopeStockRead), s.getSKU)
	r.PUT("/v1/skus/:sku", s.need(orders.ScopeStockWrite), s.setStock)
	r.POST("/v1/skus/:sku/restock", s.need(orders.ScopeStockWrite), s.restock)
	r.GET("/v1/events", s.need(orders.ScopeEventsRead), s.listEvents)
	r.GET("/v1/audit", s.need(orders.ScopeAdmin), s.audit)
	r.POST("/v1/webhooks", s.need(orders.ScopeWebhooksWrite), s.createWebhook)
	r.GET("/v1/webhooks", s.need(orders.ScopeWebhooksWrite), s.listWebhooks)
	r.GET("/v1/webhooks/:id", s.need(orders.ScopeWebhooksWrite), s.getWebhook)
	r.DELETE("/v1/webhooks/:id", s.need(orders.ScopeWebhooksWrite), s.deleteWebhook)
	r.GET("/v1/webhooks/:id/failures", s.need(orders.ScopeWebhooksWrite), s.listWebhookFailures)
	r.POST("/v1/clients", s.need(orders.ScopeAdmin), s.createClient)
	r.GET("/v1/clients", s.need(orders.ScopeAdmin), s.listClients)
	r.GET("/v1/clients/:id", s.need(orders.ScopeAdmin), s.getClient)
	r.PATCH("/v1/clients/:id", s.need(orders.ScopeAdmin), s.updateClient)
	r.POST("/v1/clients/:id/keys", s.need(orders.ScopeAdmin), s.createKey)
	r.GET("/v1/clients/:id/keys", s.need(orders.ScopeAdmin), s.listKeys)
	r.DELETE("/v1/clients/:id/keys/:key", s.need(orders.ScopeAdmin), s.revokeKey)

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	if s.metrics != nil { // else served alone on --metrics-addr
		r.GET("/metrics", s.need(orders.ScopeAdmin), gin.WrapH(s.metrics))
	}
	r.GET("/openapi.yaml", s.openapi)

	r.NoRoute(func(c *gin.Context) { s.problem(c, errNoRoute) })
	r.NoMethod(func(c *gin.Context) { s.problem(c, errNoMethod) })
}
