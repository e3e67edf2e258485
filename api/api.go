// Package api holds stockguard's HTTP contract: the OpenAPI 3.1 document of every
// route, its bodies, headers and problem types.
package api

import _ "embed" // the document is built into the binary

// OpenAPI is api/openapi.yaml: the OpenAPI 3.1 document of the HTTP API, served
// at GET /openapi.yaml and checked against every request and answer of the
// HTTP layer's tests.
//
//go:embed openapi.yaml
var OpenAPI []byte
