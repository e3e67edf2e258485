package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/stockguard/stockguard/api"
)

// openapi serves the API's OpenAPI document.
func (s *server) openapi(c *gin.Context) {
	c.Data(http.StatusOK, "application/yaml", api.OpenAPI)
}
