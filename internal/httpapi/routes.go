package httpapi

import "github.com/gin-gonic/gin"

// routes lists every route of the API.
func (s *server) routes(r *gin.Engine) {
	r.POST("/v1/orders", s.placeOrder)
	r.GET("/v1/orders", s.admin, s.listOrders)
	r.GET("/v1/orders/:id", s.getOrder)
	r.POST("/v1/orders/:id/cancel", s.cancelOrder)
	r.POST("/v1/reservations", s.placeHold)
	r.GET("/v1/reservations", s.admin, s.listHolds)
	r.GET("/v1/reservations/:id", s.getHold)
	r.POST("/v1/reservations/:id/extend", s.extendHold)
	r.POST("/v1/reservations/:id/confirm", s.confirmHold)
	r.POST("/v1/reservations/:id/release", s.releaseHold)
	r.GET("/v1/skus", s.listSKUs)
	r.GET("/v1/skus/:sku", s.getSKU)
	r.PUT("/v1/skus/:sku", s.admin, s.setStock)
	r.POST("/v1/skus/:sku/restock", s.admin, s.restock)
	r.GET("/v1/events", s.admin, s.listEvents)
	r.GET("/v1/audit", s.admin, s.audit)
	r.POST("/v1/webhooks", s.admin, s.createWebhook)
	r.GET("/v1/webhooks", s.admin, s.listWebhooks)
	r.GET("/v1/webhooks/:id", s.admin, s.getWebhook)
	r.PATCH("/v1/webhooks/:id", s.admin, s.updateWebhook)
	r.DELETE("/v1/webhooks/:id", s.admin, s.deleteWebhook)
	r.GET("/v1/webhooks/:id/failures", s.admin, s.listWebhookFailures)

	r.GET("/healthz", s.healthz)
	r.GET("/readyz", s.readyz)
	r.GET("/metrics", gin.WrapH(s.metrics))
	r.GET("/openapi.yaml", s.openapi)

	r.NoRoute(func(c *gin.Context) { s.problem(c, errNoRoute) })
	r.NoMethod(func(c *gin.Context) { s.problem(c, errNoMethod) })
}
