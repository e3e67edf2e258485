package api_test

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/stockguard/stockguard/api"
)

// The document is OpenAPI 3.1 and valid as such: its schemas, examples and
// references included.
func TestDocumentValidates(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation(), openapi3.EnableSchemaPatternValidation()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if doc.Paths.Len() == 0 {
		t.Fatal("no paths")
	}
}
