package clientcontract

import (
	"os"
	"strings"
	"testing"
)

// The README's API section shows pkg/client in a few lines: they are the body
// of ExampleClient_PlaceOrder (whose output go test checks), with the address
// of a replica for the example's fake service, so that they cannot drift from
// code that runs.
func TestReadmeClientSnippet(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../pkg/client/example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, api, ok := strings.Cut(string(readme), "### API\n")
	if !ok {
		t.Fatal("README.md has no ### API section")
	}
	_, block, ok := strings.Cut(api, "```go\n")
	if !ok {
		t.Fatal("README.md's API section shows no Go")
	}
	block, _, _ = strings.Cut(block, "```\n")
	body := strings.ReplaceAll(block, `client.New("http://127.0.0.1:8080",`, "client.New(srv.URL,")
	var indented strings.Builder
	for line := range strings.Lines(body) {
		if line != "\n" {
			indented.WriteString("\t")
		}
		indented.WriteString(line)
	}
	_, fn, ok := strings.Cut(string(example), "func ExampleClient_PlaceOrder() {\n")
	if !ok {
		t.Fatal("pkg/client has no ExampleClient_PlaceOrder")
	}
	if !strings.Contains(fn, indented.String()) {
		t.Errorf("README.md's client lines are not ExampleClient_PlaceOrder's:\n%s", block)
	}
}
