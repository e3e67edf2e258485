package httpapi

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// scanOrderBodies are bodies scanOrder reads or leaves to decodeJSON, near
// the edges of its shape.
var scanOrderBodies = []string{
	`{"items":[{"sku":"SKU-00001","quantity":1}]}`, `{"items":[{"sku":"A","quantity":1}],"customer":"c-1"}`,
	`{"customer":"c-1","items":[{"quantity":7,"sku":"A"},{"sku":"B","quantity":1000}]}`, " \t\r\n{ \"items\" : [ ] } \n",
	`{"items":[{}]}`, `{"items":[{"sku":""}]}`, `{"items":[{"quantity":0}]}`, `{"items":[{"sku":"A","quantity":-0}]}`,
	`{"items":[{"sku":"A","quantity":-5}]}`, `{"items":[{"sku":"A","quantity":1001}]}`, `{"items":[{"sku":"A","quantity":01}]}`,
	`{"items":[{"sku":"A","quantity":1.0}]}`, `{"items":[{"sku":"A","quantity":1e0}]}`, `{"items":[{"sku":"A","quantity":1E0}]}`,
	`{"items":[{"sku":"A","quantity":999999999999999999}]}`, `{"items":[{"sku":"A","quantity":9999999999999999999}]}`,
	`{"items":[{"sku":"A","quantity":"1"}]}`, `{"items":[{"sku":1,"quantity":1}]}`, `{"items":[{"sku":"A","quantity":1,"sku":"B"}]}`,
	`{"items":[{"sku":"A","quantity":1,"quantity":2}]}`, `{"items":[],"items":[]}`, `{"customer":"a","customer":"b"}`,
	`{"customer":""}`, `{"customer":"\u0041"}`, `{"customer":"é"}`, `{"items":[{"sku":"A<>&","quantity":1}]}`,
	`{"items":[{"sku":"A\"","quantity":1}]}`, `{"items":[{"sku":"A","quantity":1},]}`, `{"items":[,]}`, `{,}`, `{"items":[]`,
	`{"items":[]}}`, `{"items":[]} x`, `{"items":null}`, `{"items":[null]}`, `{"Items":[]}`, `{"items":[{"SKU":"A"}]}`,
	`{"items":[{"sku":"A","quantity":1}],"other":1}`, `{"items":{}}`, `{"items":[[]]}`, `[]`, `{}`, ``, `{`, `}`, `"x"`,
	`{"items":[{"sku":"A","quantity":-}]}`, `{"items":[{"sku":"A","quantity":1x}]}`, "\ufeff{}", `{"items":[{"sku":"A" "quantity":1}]}`,
	`{"items" "x"}`, `{"items":[{"sku":"A","quantity":1}{"sku":"B","quantity":1}]}`, `{"customer":"x" , "items":[ ]}`,
}

// scanOrder's answer, whenever it gives one, is decodeJSON's.
func TestScanOrderAgreesWithDecode(t *testing.T) {
	for _, body := range append(scanOrderBodies, orderSeeds()...) {
		checkScanOrder(t, []byte(body))
	}
}

// The bodies clients send are read by scanOrder, not left to encoding/json.
func TestScanOrderReadsPlainOrders(t *testing.T) {
	line := `{"sku":"SKU-00001","quantity":1}`
	for _, body := range []string{
		`{"items":[` + line + `]}`, `{"items":[` + strings.TrimSuffix(strings.Repeat(line+",", 50), ",") + `]}`,
		`{"items":[{"sku":"A-1","quantity":2}],"customer":"shopper-42"}`, " {\n \"items\": [\n  {\"sku\": \"A\", \"quantity\": 3}\n ]\n}\n",
	} {
		if _, _, ok := scanOrder([]byte(body)); !ok {
			t.Errorf("%s: left to decodeJSON", body)
		}
	}
}

func FuzzScanOrder(f *testing.F) {
	for _, s := range append(scanOrderBodies, orderSeeds()...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkScanOrder(t, body) })
}

func checkScanOrder(t *testing.T, body []byte) {
	t.Helper()
	items, customer, ok := scanOrder(body)
	if !ok {
		return
	}
	var req placeOrderRequest
	if err := decodeJSON(body, &req); err != nil {
		t.Fatalf("%q: scanOrder read it, decodeJSON refuses it: %v", body, err)
	}
	if want := req.items(); !reflect.DeepEqual(items, want) || customer != string(req.Customer) {
		t.Fatalf("%q: scanOrder %s, decodeJSON %s", body, fmt.Sprintf("%+v %q", items, customer), fmt.Sprintf("%+v %q", want, req.Customer))
	}
	got, gotCustomer, err := orderBody(body)
	if err != nil || !reflect.DeepEqual(got, items) || gotCustomer != customer {
		t.Fatalf("%q: orderBody %+v %q %v", body, got, gotCustomer, err)
	}
}
