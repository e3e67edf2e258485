// Package clientcontract holds the test that keeps pkg/client, the API's Go
// client, in step with the contract, api/openapi.yaml: every operation has a
// method that sends its method, path and Idempotency-Key as documented and
// accepts each of its documented 2xx statuses, and every schema's properties
// are the JSON fields of the client's type for it; and the client, run
// against the real HTTP handler (on use cases that fill every optional
// field, every exchange checked against the contract), decodes each answer
// without dropping a member. It lives in the service's
// module because it reads the contract with kin-openapi, which pkg/client
// (standard library only) does not require.
package clientcontract
